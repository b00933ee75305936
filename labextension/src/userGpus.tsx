import React from 'react';

import type { ICluster, Phase } from './clusterApi';
import { idleGpus, usedGpus } from './render';
import { ISort, SortValue, SortableHeaders, sortRows } from './sortable';

/** One user's GPUs across their clusters; null where none was measured. */
export interface IUserGpus {
  readonly user: string;
  /** GPUs of their clusters that hold them (running or starting). */
  readonly held: number;
  readonly used: number | null;
  readonly idle: number | null;
  /** Clusters holding GPUs whose use is not measured (or not read yet). */
  readonly notMeasured: number;
}

// The phases in which a cluster's GPUs are taken from everyone else; a queued,
// pending or suspended cluster holds none.
const HOLDING: ReadonlySet<Phase> = new Set<Phase>([
  'Ready',
  'Degraded',
  'Starting'
]);

type Mutable<T> = { -readonly [K in keyof T]: T[K] };

/**
 * Every owner's GPUs held, used and idle. Used and idle add up only the
 * measured clusters (the rest are counted in `notMeasured`): a cluster nobody
 * measured is neither busy nor idle.
 */
export function userGpus(clusters: ReadonlyArray<ICluster>): IUserGpus[] {
  const byUser = new Map<string, Mutable<IUserGpus>>();
  for (const c of clusters) {
    let row = byUser.get(c.owner);
    if (!row) {
      row = { user: c.owner, held: 0, used: null, idle: null, notMeasured: 0 };
      byUser.set(c.owner, row);
    }
    if (!HOLDING.has(c.phase)) {
      continue;
    }
    row.held += c.gpus;
    const used = usedGpus(c);
    if (used === null) {
      // A CPU-only cluster has nothing to measure.
      row.notMeasured += c.gpus > 0 ? 1 : 0;
      continue;
    }
    row.used = (row.used ?? 0) + used;
    row.idle = (row.idle ?? 0) + (idleGpus(c) ?? 0);
  }
  return [...byUser.values()];
}

type UserSortKey = 'user' | 'held' | 'used' | 'idle' | 'notMeasured';

const USER_COLUMNS: [UserSortKey, string][] = [
  ['user', 'User'],
  ['held', 'GPUs held'],
  ['used', 'Used'],
  ['idle', 'Idle'],
  ['notMeasured', 'Clusters not measured']
];

const TEXT_COLUMNS: ReadonlySet<UserSortKey> = new Set<UserSortKey>(['user']);

function dash(value: number | null): string | number {
  return value ?? '—';
}

/**
 * The overview's per-user summary, above the clusters: who holds GPUs that
 * sit idle (most idle first by default).
 */
export function UserGpus(props: {
  clusters: ReadonlyArray<ICluster>;
  stale: boolean;
}): React.ReactElement {
  const [sort, setSort] = React.useState<ISort<UserSortKey>>({
    key: 'idle',
    down: true
  });
  const value = (row: IUserGpus): SortValue => row[sort.key];
  const rows = sortRows(
    userGpus(props.clusters),
    value,
    sort.down,
    row => row.user
  );
  return (
    <table
      className={`jp-raylab-overview jp-raylab-user-gpus${props.stale ? ' jp-raylab-mod-stale' : ''}`}
      aria-label="GPUs by user"
    >
      <thead>
        <tr>
          <SortableHeaders
            columns={USER_COLUMNS}
            sort={sort}
            onSort={setSort}
            ascendingFirst={TEXT_COLUMNS}
          />
        </tr>
      </thead>
      <tbody>
        {rows.map(row => (
          <tr key={row.user} data-user={row.user}>
            <td>{row.user}</td>
            <td>{row.held}</td>
            <td>{dash(row.used)}</td>
            <td>{dash(row.idle)}</td>
            <td>{row.notMeasured}</td>
          </tr>
        ))}
      </tbody>
    </table>
  );
}
