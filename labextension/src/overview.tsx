import {
  deleteIcon,
  launchIcon,
  listIcon,
  pauseIcon,
  runIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import { useClusterActions } from './card';
import { ICluster, IUsage, clusterKey, dashboardPath } from './clusterApi';
import { useNow } from './clock';
import { CommandIDs, Run } from './commandIds';
import { IconButton } from './iconButton';
import {
  canSuspend,
  gpuHoursText,
  gpusText,
  idleGpus,
  idleSeconds,
  idleText,
  phaseText,
  usedGpus
} from './render';
import { ISort, SortValue, SortableHeaders, sortRows } from './sortable';
import { UserGpus } from './userGpus';

type SortKey =
  | 'owner'
  | 'namespace'
  | 'name'
  | 'gpus'
  | 'used'
  | 'idleGpus'
  | 'phase'
  | 'idle'
  | 'hours';

/** The overview's columns; Namespace only where clusters have one (KubeRay). */
const COLUMNS: [SortKey, string][] = [
  ['owner', 'Owner'],
  ['namespace', 'Namespace'],
  ['name', 'Cluster'],
  ['gpus', 'GPUs'],
  ['used', 'GPUs used'],
  ['idleGpus', 'Idle GPUs'],
  ['phase', 'Status'],
  ['idle', 'Idle'],
  ['hours', 'GPU-h (7 d)']
];

const TEXT_COLUMNS: ReadonlySet<SortKey> = new Set<SortKey>([
  'owner',
  'namespace'
]);

/**
 * One overview row's actions: what an admin does to someone's cluster
 * (the commands reach clusters in other namespaces by their namespaced path).
 */
function OverviewActions(props: {
  cluster: ICluster;
  run: Run;
}): React.ReactElement {
  const { cluster: c, run } = props;
  const [busy, act] = useClusterActions(c, run);
  const deleting = c.phase === 'Deleting';
  const which = c.namespace ? `${c.name} in ${c.namespace}` : c.name;
  return (
    <div
      className="jp-raylab-overview-actions"
      role="group"
      aria-label={`Actions for ${which}`}
    >
      {dashboardPath(c) !== null && (
        <IconButton
          icon={launchIcon}
          label={`Open the Ray dashboard of ${which}`}
          disabled={!c.head_ready}
          onClick={act(CommandIDs.dashboard, 'Opening…')}
        />
      )}
      <IconButton
        icon={listIcon}
        label={`Show the log of ${which}`}
        onClick={act(CommandIDs.logs, 'Opening…')}
      />
      {canSuspend(c.phase) ? (
        <IconButton
          icon={pauseIcon}
          label={`Suspend ${which}`}
          disabled={busy !== null}
          onClick={act(CommandIDs.suspend, 'Suspending…')}
        />
      ) : (
        <IconButton
          icon={runIcon}
          label={`Resume ${which}`}
          disabled={deleting || busy !== null}
          onClick={act(CommandIDs.resume, 'Resuming…')}
        />
      )}
      <IconButton
        icon={deleteIcon}
        label={`Delete ${which}`}
        className="jp-raylab-delete"
        disabled={deleting || busy !== null}
        onClick={act(CommandIDs.remove, 'Deleting…')}
      />
    </div>
  );
}

/**
 * The admins' "All users" view: GPUs by user, then every cluster in one
 * sortable table, idle ones marked (sorted first by default: the ones worth a
 * look), each with its actions.
 */
export function Overview(props: {
  clusters: ReadonlyArray<ICluster>;
  usage: IUsage | null;
  stale: boolean;
  run: Run;
}): React.ReactElement {
  const now = useNow(15000) / 1000;
  const [sort, setSort] = React.useState<ISort<SortKey>>({
    key: 'idle',
    down: true
  });
  const hours = (c: ICluster): number =>
    (c.uid && props.usage?.clusters[c.uid]) || 0;
  const value = (c: ICluster): SortValue => {
    switch (sort.key) {
      case 'owner':
        return c.owner;
      case 'namespace':
        return c.namespace ?? '';
      case 'name':
        return c.name;
      case 'gpus':
        return c.gpus;
      case 'used':
        return usedGpus(c);
      case 'idleGpus':
        return idleGpus(c);
      case 'phase':
        return c.phase;
      case 'idle':
        return idleSeconds(c, now) ?? -1;
      case 'hours':
        return hours(c);
    }
  };
  const rows = sortRows(props.clusters, value, sort.down, clusterKey);
  const namespaced = props.clusters.some(c => c.namespace !== null);
  const columns = COLUMNS.filter(([key]) => namespaced || key !== 'namespace');
  return (
    <div className="jp-raylab-overview-view">
      <UserGpus clusters={props.clusters} stale={props.stale} />
      <table
        className={`jp-raylab-overview${props.stale ? ' jp-raylab-mod-stale' : ''}`}
        aria-label="Every user's clusters"
      >
        <thead>
          <tr>
            <SortableHeaders
              columns={columns}
              sort={sort}
              onSort={setSort}
              ascendingFirst={TEXT_COLUMNS}
            />
            <th>Actions</th>
          </tr>
        </thead>
        <tbody>
          {rows.map(c => {
            const idle = idleText(c, now);
            const idleNow = idleSeconds(c, now) !== null;
            return (
              <tr
                key={clusterKey(c)}
                data-cluster={c.name}
                data-namespace={c.namespace ?? undefined}
                className={idleNow ? 'jp-raylab-mod-idle' : undefined}
              >
                <td>{c.owner}</td>
                {namespaced && <td>{c.namespace}</td>}
                <td>{c.name}</td>
                <td>{gpusText(c)}</td>
                <td>{usedGpus(c) ?? '—'}</td>
                <td>{idleGpus(c) ?? '—'}</td>
                <td title={phaseText(c)}>
                  {c.standby_until ? `${c.phase} (standby)` : c.phase}
                </td>
                <td>{idle}</td>
                <td>{gpuHoursText(hours(c))}</td>
                <td>
                  <OverviewActions cluster={c} run={props.run} />
                </td>
              </tr>
            );
          })}
        </tbody>
      </table>
    </div>
  );
}
