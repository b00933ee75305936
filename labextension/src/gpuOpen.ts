import { ServerConnection } from '@jupyterlab/services';

import { ICluster, clusterRoute, readGpuUse } from './clusterApi';
import { IProfilesReply } from './profiles';

/** Whether the server reads GPU use on demand (`GET clusters/NAME/gpu-use`). */
export function hasGpuUseFeature(reply: IProfilesReply): boolean {
  return Array.isArray(reply.features) && reply.features.includes('gpu-use');
}

/**
 * Whether opening this cluster's card reads its GPUs again: it has GPUs and
 * runs (Ready or Degraded, its head answering). What the server would refuse
 * (with a 409) is not asked.
 */
export function readsGpuUseOnOpen(cluster: ICluster): boolean {
  return (
    cluster.gpus > 0 &&
    (cluster.phase === 'Ready' || cluster.phase === 'Degraded') &&
    cluster.head_ready
  );
}

/**
 * What a card calls when it is opened: read the cluster's GPU use now. The
 * reading reaches the card (and every other open sidebar) through the event
 * stream; a failure is left unsaid, the card keeps the last sweep's figure.
 * Clusters in another namespace (an admin's overview) are not read: the
 * server reads the dashboards of its own namespace only.
 */
export function gpuUseOnOpen(
  serverSettings: ServerConnection.ISettings,
  home: string | null | undefined
): (cluster: ICluster) => void {
  return cluster => {
    const route = clusterRoute(cluster, home);
    if (!readsGpuUseOnOpen(cluster) || route.namespace !== null) {
      return;
    }
    void readGpuUse(route, serverSettings).catch(() => undefined);
  };
}
