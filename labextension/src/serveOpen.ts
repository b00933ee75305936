import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

import {
  ICluster,
  IServeApps,
  clusterRoute,
  readServeApps
} from './clusterApi';
import { IProfilesReply } from './profiles';

/** Whether the server lists a cluster's Serve apps (`GET clusters/NAME/apps`). */
export function hasServeAppsFeature(reply: IProfilesReply): boolean {
  return Array.isArray(reply.features) && reply.features.includes('serve-apps');
}

/**
 * Whether an opened card reads this cluster's Serve apps: it runs (Ready or
 * Degraded) and its head answers. What the server would refuse is not asked.
 */
export function readsServeAppsOnOpen(cluster: ICluster): boolean {
  return (
    (cluster.phase === 'Ready' || cluster.phase === 'Degraded') &&
    cluster.head_ready
  );
}

/**
 * The absolute URL of an app's `path` (below the server's base URL) through
 * Jupyter's proxy: what the browser opens, and what Copy URL copies.
 */
export function serveAppUrl(
  baseUrl: string,
  path: string,
  here: string = window.location.href
): string {
  return new URL(URLExt.join(baseUrl, path), here).href;
}

/** What an opened card reads its Serve apps with (where the server can). */
export interface IServeReader {
  /**
   * Read the cluster's apps now; null for a cluster this server does not read
   * (not running, or in another namespace: an admin's overview).
   */
  readonly read: (cluster: ICluster) => Promise<IServeApps> | null;
  /** The absolute URL of an app's path. */
  readonly url: (path: string) => string;
  /** How often an open card reads again (ms). */
  readonly periodMs: number;
}

/**
 * The reader of this server's Serve apps. Clusters in another namespace are
 * not read: the server reads the dashboards of its own namespace only, and
 * proxies its owner's apps only.
 */
export function serveReader(
  serverSettings: ServerConnection.ISettings,
  home: string | null | undefined,
  periodMs = 10000
): IServeReader {
  return {
    periodMs,
    read: cluster => {
      const route = clusterRoute(cluster, home);
      if (!readsServeAppsOnOpen(cluster) || route.namespace !== null) {
        return null;
      }
      return readServeApps(route, serverSettings);
    },
    url: path => serveAppUrl(serverSettings.baseUrl, path)
  };
}

/**
 * The newer of two readings of a cluster's apps: the event stream's (the
 * server's last read) and the card's own.
 */
export function newestServe(
  a: IServeApps | null | undefined,
  b: IServeApps | null | undefined
): IServeApps | null {
  if (!a || !b) {
    return a ?? b ?? null;
  }
  return b.at > a.at ? b : a;
}
