import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';
import { IDisposable } from '@lumino/disposable';
import { ISignal, Signal } from '@lumino/signaling';

import { API_NAMESPACE, RaylabAPIError, describeError } from './api';
import { ICluster, clusterKey } from './clusterApi';
import { ISSEMessage, readEventStream } from './sse';

/**
 * Where the event stream stands.
 * - `connecting`: the first attempt, nothing received yet
 * - `open`: the snapshot arrived, changes are live
 * - `retrying`: the stream failed; `serverError` says why, `retryAt` when
 *   the next attempt starts
 */
export type StreamState = 'connecting' | 'open' | 'retrying';

/**
 * Everything the sidebar renders, as one immutable value: a new object on
 * every change, so React can compare by identity.
 */
export interface IClusterListState {
  /**
   * Sorted by name, then namespace. Unchanged clusters keep their object
   * identity.
   */
  readonly clusters: ReadonlyArray<ICluster>;
  readonly stream: StreamState;
  /** True once a snapshot arrived (the list is known, possibly stale). */
  readonly loaded: boolean;
  /** Why the stream to the Jupyter server failed, while it is failing. */
  readonly serverError: string | null;
  /** When the next attempt starts (ms since the epoch), while retrying. */
  readonly retryAt: number | null;
  /** False while the server cannot reach the backend (Kubernetes, ...). */
  readonly backendAvailable: boolean;
  readonly backendError: string | null;
  /** Admins: every user's clusters instead of their own. */
  readonly showAll: boolean;
}

export namespace ClusterListModel {
  export interface IOptions {
    serverSettings: ServerConnection.ISettings;
    /** First retry delay (ms); doubles each failure. */
    minBackoffMs?: number;
    /** Longest retry delay (ms). */
    maxBackoffMs?: number;
    /**
     * Reconnect when nothing (not even a keepalive, sent every 15 s) arrived
     * for this long (ms): a proxy may keep a dead connection open.
     */
    staleAfterMs?: number;
    showAll?: boolean;
  }
}

interface IEventBody {
  type: string;
  cluster?: ICluster;
  clusters?: ICluster[];
  available?: boolean;
  error?: string | null;
}

/**
 * The clusters the caller can see, kept live from the server's event stream
 * (`GET raylab/events`, Server-Sent Events): a snapshot, then one message per
 * change. There is no polling: when the stream breaks the model reconnects
 * with exponential backoff, and the reconnect's snapshot replaces the list.
 */
export class ClusterListModel implements IDisposable {
  constructor(options: ClusterListModel.IOptions) {
    this._settings = options.serverSettings;
    this._minBackoff = options.minBackoffMs ?? 1000;
    this._maxBackoff = options.maxBackoffMs ?? 30000;
    this._staleAfter = options.staleAfterMs ?? 45000;
    this._state = { ...this._state, showAll: options.showAll ?? false };
  }

  /** Emitted after every change of `state`. */
  get changed(): ISignal<this, IClusterListState> {
    return this._changed;
  }

  get state(): IClusterListState {
    return this._state;
  }

  get clusters(): ReadonlyArray<ICluster> {
    return this._state.clusters;
  }

  /** The cluster of this {@link clusterKey} (`namespace/name`). */
  get(key: string): ICluster | undefined {
    return this._byKey.get(key);
  }

  get isDisposed(): boolean {
    return this._disposed;
  }

  /** Start streaming (idempotent). */
  start(): void {
    if (!this._running && !this._disposed) {
      this._running = true;
      void this._run(this._generation);
    }
  }

  /** Switch between the caller's clusters and everyone's (admins). */
  setShowAll(showAll: boolean): void {
    if (showAll === this._state.showAll) {
      return;
    }
    this._set({ showAll, loaded: false, stream: 'connecting' });
    this._restart();
  }

  /** Drop the current stream (or the wait before a retry) and connect now. */
  reconnect(): void {
    this._attempt = 0;
    this._restart();
  }

  /**
   * Apply what a write returned (POST/PATCH reply) at once; the stream's own
   * message for the same change follows and changes nothing.
   */
  upsert(cluster: ICluster): void {
    this._apply([{ type: 'MODIFIED', cluster }]);
  }

  /** Forget a cluster the caller just deleted (by its {@link clusterKey}). */
  remove(key: string): void {
    const cluster = this._byKey.get(key);
    if (cluster) {
      this._apply([{ type: 'DELETED', cluster }]);
    }
  }

  /**
   * Handle messages as they come off the stream; public so that a benchmark
   * can feed the same path. Messages of one network chunk are applied
   * together and cause one render.
   */
  handleMessages(messages: ReadonlyArray<ISSEMessage>): void {
    const bodies: IEventBody[] = [];
    for (const message of messages) {
      try {
        bodies.push(JSON.parse(message.data) as IEventBody);
      } catch {
        console.warn('raylab: ignoring a malformed event', message);
      }
    }
    this._apply(bodies);
  }

  dispose(): void {
    if (this._disposed) {
      return;
    }
    this._disposed = true;
    this._generation++;
    this._abort?.abort();
    this._wake?.();
    Signal.clearData(this);
  }

  private _apply(bodies: ReadonlyArray<IEventBody>): void {
    let listChanged = false;
    const patch: {
      -readonly [K in keyof IClusterListState]?: IClusterListState[K];
    } = {};
    for (const body of bodies) {
      switch (body.type) {
        case 'SNAPSHOT':
          this._byKey = new Map(
            (body.clusters ?? []).map(c => [clusterKey(c), c])
          );
          listChanged = true;
          patch.loaded = true;
          patch.stream = 'open';
          patch.serverError = null;
          patch.retryAt = null;
          patch.backendAvailable = body.available ?? true;
          patch.backendError = body.error ?? null;
          this._attempt = 0;
          break;
        case 'ADDED':
        case 'MODIFIED':
          if (body.cluster) {
            const key = clusterKey(body.cluster);
            if (this._byKey.get(key) !== body.cluster) {
              this._byKey.set(key, body.cluster);
              listChanged = true;
            }
          }
          break;
        case 'DELETED':
          if (body.cluster && this._byKey.delete(clusterKey(body.cluster))) {
            listChanged = true;
          }
          break;
        case 'STATUS':
          patch.backendAvailable = body.available ?? true;
          patch.backendError = body.error ?? null;
          break;
        default:
          break;
      }
    }
    if (listChanged) {
      patch.clusters = [...this._byKey.values()].sort(byNameThenNamespace);
    }
    if (Object.keys(patch).length > 0) {
      this._set(patch);
    }
  }

  private _set(patch: Partial<IClusterListState>): void {
    this._state = { ...this._state, ...patch };
    this._changed.emit(this._state);
  }

  private _restart(): void {
    this._generation++;
    this._abort?.abort();
    this._wake?.();
    this._running = false;
    this.start();
  }

  private async _run(generation: number): Promise<void> {
    while (!this._disposed && generation === this._generation) {
      let failure: string;
      try {
        await this._stream(generation);
        failure = 'the server closed the event stream (restarting?)';
      } catch (reason) {
        failure = describeStreamError(reason);
      }
      if (this._disposed || generation !== this._generation) {
        return;
      }
      this._attempt++;
      const base = Math.min(
        this._maxBackoff,
        this._minBackoff * 2 ** Math.min(this._attempt - 1, 16)
      );
      const delay = Math.round(base * (0.8 + 0.4 * Math.random()));
      this._set({
        stream: 'retrying',
        serverError: failure,
        retryAt: Date.now() + delay
      });
      await new Promise<void>(resolve => {
        const timer = window.setTimeout(done, delay);
        function done(): void {
          window.clearTimeout(timer);
          resolve();
        }
        this._wake = done;
      });
      this._wake = null;
    }
  }

  private async _stream(generation: number): Promise<void> {
    const controller = new AbortController();
    this._abort = controller;
    let watchdog = 0;
    const arm = (): void => {
      window.clearTimeout(watchdog);
      watchdog = window.setTimeout(() => {
        this._staleReason = `no data or keepalive from the server for ${Math.round(this._staleAfter / 1000)} s`;
        controller.abort();
      }, this._staleAfter);
    };
    this._staleReason = null;
    const url = URLExt.join(this._settings.baseUrl, API_NAMESPACE, 'events');
    try {
      arm();
      const response = await ServerConnection.makeRequest(
        this._state.showAll ? `${url}?all=1` : url,
        {
          method: 'GET',
          headers: { Accept: 'text/event-stream' },
          cache: 'no-store',
          signal: controller.signal
        },
        this._settings
      );
      if (!response.ok) {
        throw await RaylabAPIError.fromResponse(url, response);
      }
      if (!response.body) {
        throw new Error('this browser cannot read streaming responses');
      }
      await readEventStream(
        response.body,
        messages => {
          if (generation === this._generation) {
            this.handleMessages(messages);
          }
        },
        arm
      );
    } catch (reason) {
      if (this._staleReason) {
        throw new Error(this._staleReason, { cause: reason });
      }
      throw reason;
    } finally {
      window.clearTimeout(watchdog);
      if (this._abort === controller) {
        this._abort = null;
      }
    }
  }

  private _settings: ServerConnection.ISettings;
  private _minBackoff: number;
  private _maxBackoff: number;
  private _staleAfter: number;
  private _staleReason: string | null = null;
  // By clusterKey: alice's and bob's `exp` are two clusters in an overview.
  private _byKey = new Map<string, ICluster>();
  private _state: IClusterListState = {
    clusters: [],
    stream: 'connecting',
    loaded: false,
    serverError: null,
    retryAt: null,
    backendAvailable: true,
    backendError: null,
    showAll: false
  };
  private _changed = new Signal<this, IClusterListState>(this);
  private _running = false;
  private _disposed = false;
  private _generation = 0;
  private _attempt = 0;
  private _abort: AbortController | null = null;
  private _wake: (() => void) | null = null;
}

/** The list's order (the server's too): by name, then namespace. */
function byNameThenNamespace(a: ICluster, b: ICluster): number {
  const order = (x: string, y: string): number => (x < y ? -1 : x > y ? 1 : 0);
  return order(a.name, b.name) || order(a.namespace ?? '', b.namespace ?? '');
}

function describeStreamError(reason: unknown): string {
  if (reason instanceof ServerConnection.NetworkError) {
    return 'cannot reach the Jupyter server';
  }
  if (reason instanceof TypeError) {
    // fetch's own failures (connection reset mid-stream)
    return `the connection to the Jupyter server broke (${reason.message})`;
  }
  return describeError(reason);
}
