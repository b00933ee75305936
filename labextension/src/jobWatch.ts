import { Notification } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { Poll } from '@lumino/polling';

import { describeError } from './api';
import {
  ICluster,
  IJob,
  clusterKey,
  clusterRoute,
  fetchJobs
} from './clusterApi';
import { ClusterListModel } from './model';
import { IProfilesReply } from './profiles';

/** The states of a job that has not ended yet. */
const UNFINISHED: ReadonlySet<string> = new Set(['PENDING', 'RUNNING']);

/** Whether the server lists the job API (`GET clusters/NAME/jobs`). */
export function hasJobsFeature(reply: IProfilesReply): boolean {
  return Array.isArray(reply.features) && reply.features.includes('jobs');
}

export namespace JobWatcher {
  export interface IOptions {
    model: ClusterListModel;
    serverSettings: ServerConnection.ISettings;
    /** The user's name: only a cluster's owner holds its token, and its jobs. */
    user: string;
    /** The server's home namespace (the profiles reply's `namespace`). */
    home: string | null | undefined;
    /** Open the log of one job (the notifications' Show log). */
    openLog: (cluster: ICluster, job: string) => void;
    /** How often each Ready cluster's jobs are fetched (ms). */
    periodMs?: number;
    /** How long to wait after a cluster's request failed (ms). */
    failedPeriodMs?: number;
  }
}

/** What the watcher knows of one cluster's jobs. */
interface IClusterJobs {
  /** Newest first. */
  jobs: ReadonlyArray<IJob>;
  /** The reply as JSON: an unchanged reply keeps `jobs`' identity. */
  json: string;
}

/**
 * The Ray jobs of the user's Ready clusters, fetched every few seconds while
 * started and the page is visible (one request per cluster; a cluster whose
 * request failed waits longer), for the cards' Jobs sections; and a
 * notification when a job that was seen pending or running ends.
 */
export class JobWatcher implements IDisposable {
  constructor(options: JobWatcher.IOptions) {
    this._model = options.model;
    this._settings = options.serverSettings;
    this._user = options.user;
    this._home = options.home;
    this._openLog = options.openLog;
    this._period = options.periodMs ?? 5000;
    this._failedPeriod = options.failedPeriodMs ?? 30000;
  }

  /** For `React.useSyncExternalStore`: called after any cluster's jobs change. */
  readonly subscribe = (listener: () => void): (() => void) => {
    this._listeners.add(listener);
    return () => {
      this._listeners.delete(listener);
    };
  };

  /** Whether the jobs of `cluster` are fetched: the user's own, and Ready. */
  watches(cluster: ICluster): boolean {
    return (
      cluster.phase === 'Ready' &&
      cluster.owner === this._user &&
      clusterRoute(cluster, this._home).namespace === null
    );
  }

  /**
   * The jobs of `cluster`, newest first (the same array while they do not
   * change); undefined before the first reply, or for a cluster not watched.
   */
  jobsOf(cluster: ICluster): ReadonlyArray<IJob> | undefined {
    return this.watches(cluster)
      ? this._jobs.get(clusterKey(cluster))?.jobs
      : undefined;
  }

  get isRunning(): boolean {
    return this._timer !== null;
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Fetch now and then every period, not while the page is hidden (idempotent). */
  start(): void {
    if (this._disposed || this._timer !== null) {
      return;
    }
    this._model.changed.connect(this._onModelChanged);
    this._timer = new Poll({
      name: 'raylab:jobs',
      factory: () => Promise.resolve(this._tick(false)),
      frequency: { interval: this._period, backoff: false },
      standby: 'when-hidden',
      auto: false
    });
    void this._timer.start();
  }

  /** Stop fetching; what is known stays until {@link start} refreshes it. */
  stop(): void {
    if (this._timer === null) {
      return;
    }
    this._timer.dispose();
    this._timer = null;
    this._generation++;
    this._inFlight.clear();
    this._model.changed.disconnect(this._onModelChanged);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this.stop();
    this._disposed = true;
    this._listeners.clear();
  }

  /** A cluster that just became Ready is fetched at once, not at the next tick. */
  private readonly _onModelChanged = (): void => {
    this._tick(true);
  };

  private _tick(onlyNew: boolean): void {
    const now = Date.now();
    const present = new Set<string>();
    let changed = false;
    for (const cluster of this._model.clusters) {
      const key = clusterKey(cluster);
      present.add(key);
      if (!this.watches(cluster)) {
        // Fetched again at once when it is Ready again (after a resume).
        this._due.delete(key);
        changed = this._jobs.delete(key) || changed;
        continue;
      }
      const due = this._due.get(key);
      if (this._inFlight.has(key) || (onlyNew && due !== undefined)) {
        continue;
      }
      if (due === undefined || now >= due) {
        void this._poll(cluster, key);
      }
    }
    for (const key of new Set([...this._active.keys(), ...this._due.keys()])) {
      if (!present.has(key)) {
        // Deleted: a new cluster of the same name starts afresh.
        this._active.delete(key);
        this._due.delete(key);
        this._failing.delete(key);
        changed = this._jobs.delete(key) || changed;
      }
    }
    if (changed) {
      this._emit();
    }
  }

  private async _poll(cluster: ICluster, key: string): Promise<void> {
    const generation = this._generation;
    this._inFlight.add(key);
    // Due again at the next tick (a little early, for the timer's jitter).
    this._due.set(key, Date.now() + this._period - 1000);
    let jobs: IJob[];
    try {
      jobs = await fetchJobs(clusterRoute(cluster, this._home), this._settings);
    } catch (reason) {
      if (generation === this._generation) {
        this._inFlight.delete(key);
        this._due.set(key, Date.now() + this._failedPeriod);
        if (!this._failing.has(key)) {
          this._failing.add(key);
          console.warn(
            `raylab: could not list the jobs of ${cluster.name}: ${describeError(reason)}`
          );
        }
      }
      return;
    }
    if (generation !== this._generation) {
      return;
    }
    this._inFlight.delete(key);
    this._failing.delete(key);
    // Deleted, or no longer Ready, while the request ran.
    const current = this._model.get(key);
    if (!current || !this.watches(current)) {
      return;
    }
    this._notifyEnded(current, key, jobs);
    const json = JSON.stringify(jobs);
    if (this._jobs.get(key)?.json !== json) {
      this._jobs.set(key, { jobs: newestFirst(jobs), json });
      this._emit();
    }
  }

  /** Notify of the jobs seen unfinished that have ended since. */
  private _notifyEnded(
    cluster: ICluster,
    key: string,
    jobs: ReadonlyArray<IJob>
  ): void {
    let active = this._active.get(key);
    if (!active) {
      active = new Set();
      this._active.set(key, active);
    }
    for (const job of jobs) {
      if (UNFINISHED.has(job.status)) {
        active.add(job.name);
      } else if (active.delete(job.name)) {
        this._notify(cluster, job);
      }
    }
  }

  private _notify(cluster: ICluster, job: IJob): void {
    const what = `Job ${job.name} on ${cluster.name}`;
    const options = {
      actions: [
        {
          label: 'Show log',
          caption: `Open the log of job ${job.name}`,
          callback: () => this._openLog(cluster, job.name)
        }
      ]
    };
    switch (job.status) {
      case 'SUCCEEDED':
        Notification.success(`${what} succeeded`, {
          ...options,
          autoClose: 15000
        });
        break;
      case 'FAILED': {
        const why = firstLine(job.message);
        Notification.error(`${what} failed${why ? `: ${why}` : ''}`, {
          ...options,
          autoClose: false
        });
        break;
      }
      default:
        Notification.info(`${what} was stopped`, {
          ...options,
          autoClose: 15000
        });
    }
  }

  private _emit(): void {
    this._listeners.forEach(listener => listener());
  }

  private readonly _model: ClusterListModel;
  private readonly _settings: ServerConnection.ISettings;
  private readonly _user: string;
  private readonly _home: string | null | undefined;
  private readonly _openLog: (cluster: ICluster, job: string) => void;
  private readonly _period: number;
  private readonly _failedPeriod: number;
  private readonly _listeners = new Set<() => void>();
  /** By cluster key. */
  private readonly _jobs = new Map<string, IClusterJobs>();
  /** When each cluster is due to be fetched again (ms since the epoch). */
  private readonly _due = new Map<string, number>();
  private readonly _inFlight = new Set<string>();
  /** Clusters whose last request failed (warned once per failure streak). */
  private readonly _failing = new Set<string>();
  /** The jobs this Lab saw pending or running, by cluster key. */
  private readonly _active = new Map<string, Set<string>>();
  private _timer: Poll | null = null;
  private _generation = 0;
  private _disposed = false;
}

/** The newest first; a job yet to start is newer than any started one. */
function newestFirst(jobs: ReadonlyArray<IJob>): IJob[] {
  const at = (job: IJob): number => job.started ?? Number.MAX_VALUE;
  return [...jobs].sort((a, b) => at(b) - at(a) || (a.name < b.name ? -1 : 1));
}

/** The first line of Ray's message that says something, cut to 200 characters. */
function firstLine(message: string): string {
  const line = message
    .split('\n')
    .map(x => x.trim())
    .find(x => x.length > 0);
  return line === undefined ? '' : line.slice(0, 200);
}
