import { ServerConnection } from '@jupyterlab/services';

import { requestAPI, requestAPIWithStatus } from './api';

/**
 * The lifecycle phases of a cluster (`raylab/model.py`, `Phase`).
 */
export type Phase =
  | 'Queued'
  | 'Pending'
  | 'Starting'
  | 'Ready'
  | 'Degraded'
  | 'Suspended'
  | 'Failed'
  | 'Deleting';

/**
 * What was asked for (`raylab/spec.py`, `ClusterSpec`).
 */
export interface IClusterSpec {
  name: string;
  gpus: number;
  gpu_type: string;
  workers: number;
  cpus: string;
  memory: string;
  image: string | null;
  min_workers: number | null;
  max_workers: number | null;
  idle_timeout_minutes: number | null;
  /** The owner's own idle limit (minutes), below the admin's; null: the admin's. */
  idle_suspend_minutes?: number | null;
  /** The Kueue priority class asked for; null: the default. */
  priority?: string | null;
}

/**
 * Where a cluster stands in its Kueue queue (`raylab/model.py`, `QueueInfo`);
 * null figures are what Kubernetes would not tell this user.
 */
export interface IQueueInfo {
  name: string;
  state: 'Queued' | 'Admitted' | 'Inactive';
  cluster_queue: string;
  priority: string;
  position: number | null;
  ahead: number | null;
  ahead_gpus: number | null;
  gpus_in_use: number | null;
  gpus_quota: number | null;
  preempted: string;
  message: string;
}

/**
 * What the culler keeps on the cluster (`raylab/model.py`, `IdleState`), in
 * epoch seconds: empty while it is in use.
 */
export interface IIdleState {
  since: number | null;
  suspend_at: number | null;
  unknown_since: number | null;
  unknown_reason: string;
  suspended_at: number | null;
}

/**
 * The Ray environment a cluster remembers (`raylab/environment.py`,
 * `ClusterEnvironment`): names only, never the values of its variables.
 */
export interface IEnvironment {
  working_dir: string | null;
  working_dir_bytes: number;
  working_dir_files: number;
  excludes: string[];
  pip: string[];
  wheels: string[];
  local_packages: string[];
  env_names: string[];
}

/**
 * One GPU as Ray's reporter agent read it through NVML (`raylab/model.py`,
 * `GpuReading`).
 */
export interface IGpuReading {
  /** The node's IP, as the Ray dashboard names it. */
  node: string;
  index: number;
  name: string;
  /** Percent, 0–100. */
  utilization: number;
  memory_used_mib: number;
  memory_total_mib: number;
}

/**
 * Whether the figures are real: `not_measured` (the dashboard answered but no
 * node reports a GPU: logical GPUs, no NVML) and `unknown` (the dashboard
 * could not be read) carry no figures, only `why`.
 */
export type GpuUseState = 'measured' | 'not_measured' | 'unknown';

/**
 * How a cluster's GPUs are used, as last read (`raylab/model.py`, `GpuUse`).
 * The totals are over `gpus`, the GPUs the nodes reported (not the GPUs the
 * cluster asked for).
 */
export interface IGpuUse {
  state: GpuUseState;
  /** When it was read (epoch seconds). */
  at: number;
  /** Why it is not measured; '' when measured. */
  why: string;
  /** Percent at or above which a GPU counts as busy. */
  threshold: number;
  gpus: IGpuReading[];
  count: number;
  busy: number;
  /** Mean utilization (percent, one decimal). */
  utilization: number;
  memory_used_mib: number;
  memory_total_mib: number;
  /** The last hour's (epoch seconds, mean utilization %), oldest first. */
  history: [number, number][];
}

/**
 * One Ray Serve application (`raylab/serving/model.py`, `ServeApp`).
 */
export interface IServeApp {
  name: string;
  /** Its route prefix (`/hello`); null: no HTTP route (handles only). */
  route: string | null;
  /** Serve's: RUNNING, DEPLOYING, DEPLOY_FAILED, UNHEALTHY, DELETING, ... */
  status: string;
  /** Serve's word on it (why it failed, for one); or ''. */
  message: string;
  replicas: number;
  running_replicas: number;
  /** Below the server's base URL (`raylab/clusters/NAME/serve/hello`); '' without a route. */
  path: string;
  /** Straight to the cluster's Serve port, for code on the cluster; '' without a route. */
  in_cluster_url: string;
}

/**
 * `running`: Serve answered (with no app, maybe); `none`: Serve was never
 * started on the cluster; `unknown`: the dashboard could not be read (`why`).
 */
export type ServeState = 'running' | 'none' | 'unknown';

/** A cluster's Serve apps as last read (`raylab/serving/model.py`, `ServeApps`). */
export interface IServeApps {
  state: ServeState;
  /** When it was read (epoch seconds). */
  at: number;
  /** Why it is unknown; '' otherwise. */
  why: string;
  apps: IServeApp[];
}

/**
 * One cluster as the server reports it (`ClusterInfo.to_json`).
 */
export interface ICluster {
  name: string;
  owner: string;
  backend: string;
  phase: Phase;
  reason: string;
  head_ready: boolean;
  workers_ready: number;
  workers_desired: number;
  /** Epoch seconds. */
  created: number;
  endpoints: {
    client: string | null;
    dashboard: string | null;
    /** The GCS where a kernel on this server drives the cluster directly. */
    gcs?: string | null;
  };
  namespace: string | null;
  ray_version: string | null;
  python_version: string | null;
  logical_gpus: boolean;
  /** A standby's end (epoch s): the next `up` of its shape claims it; else null. */
  standby_until?: number | null;
  /** Null until a kernel connected (or `up` made it) with an environment. */
  environment: IEnvironment | null;
  spec: IClusterSpec;
  gpus: number;
  gpu_type: string;
  /** The cluster's lasting identity (its GPU-hours are kept under it). */
  uid?: string;
  /** Absent from servers older than idle suspension. */
  idle?: IIdleState;
  /**
   * The proxied Ray dashboard, below the server's base URL; null when this
   * server has none for it (a cluster in another user's namespace). Absent
   * from older servers: then `clusters/NAME/dashboard/`.
   */
  dashboard_path?: string | null;
  /** Its place in a Kueue queue; null (or absent) when Kueue does not hold it. */
  queue?: IQueueInfo | null;
  /**
   * Its GPUs' use as the server last read it; null when not read, absent from
   * servers older than GPU-use reading.
   */
  gpu_use?: IGpuUse | null;
  /**
   * Its Serve apps as the server last read them; null when not read, absent
   * from servers older than Serve apps.
   */
  serve?: IServeApps | null;
}

/**
 * The body of `POST clusters`, by the names of the fields the server declares
 * (`IRequestField`): every field is optional, the server fills in the
 * profile's defaults. Numbers the user typed badly are sent as typed so the
 * server names the field in its 422 reply.
 */
export type CreateRequest = Record<string, number | string>;

/**
 * A cluster's identity in the model, the sidebar and the commands:
 * `namespace/name`, as the server's cache keys it (an admin's overview holds
 * alice's `exp` and bob's `exp`); the name alone on the local backend.
 */
export function clusterKey(cluster: {
  name: string;
  namespace: string | null;
}): string {
  return cluster.namespace
    ? `${cluster.namespace}/${cluster.name}`
    : cluster.name;
}

/**
 * Where the REST API finds one cluster: `clusters/NAME` when `namespace` is
 * null, else `namespaces/NS/clusters/NAME` (admins only). Made by
 * {@link clusterRoute}.
 */
export interface IClusterRoute {
  readonly name: string;
  readonly namespace: string | null;
}

/**
 * The route of a cluster, given the server's home namespace (the profiles
 * reply's `namespace`, where a name alone points): a cluster in another
 * namespace gets the namespaced path. `home` undefined (a server that does
 * not say, older than the overview): the name alone.
 */
export function clusterRoute(
  cluster: { name: string; namespace: string | null },
  home: string | null | undefined
): IClusterRoute {
  const elsewhere =
    home !== undefined &&
    cluster.namespace !== null &&
    cluster.namespace !== home;
  return {
    name: cluster.name,
    namespace: elsewhere ? cluster.namespace : null
  };
}

function clusterPath(route: IClusterRoute, ...rest: string[]): string {
  const path = ['clusters', encodeURIComponent(route.name), ...rest];
  if (route.namespace !== null) {
    path.unshift('namespaces', encodeURIComponent(route.namespace));
  }
  return path.join('/');
}

/**
 * Create a cluster. `created` is false when the caller already had a cluster
 * of that name (the server then returns it, with HTTP 200).
 */
export async function createCluster(
  body: CreateRequest,
  settings?: ServerConnection.ISettings
): Promise<{ cluster: ICluster; created: boolean }> {
  const reply = await requestAPIWithStatus<{ cluster: ICluster }>(
    'clusters',
    { method: 'POST', body: JSON.stringify(body) },
    settings
  );
  return { cluster: reply.body.cluster, created: reply.status === 201 };
}

export async function patchCluster(
  route: IClusterRoute,
  body: { workers: number | string } | { suspend: boolean },
  settings?: ServerConnection.ISettings
): Promise<ICluster> {
  const reply = await requestAPI<{ cluster: ICluster }>(
    clusterPath(route),
    { method: 'PATCH', body: JSON.stringify(body) },
    settings
  );
  return reply.cluster;
}

/** Restart an idle cluster's clock (the warning's Keep running). */
export async function keepRunning(
  route: IClusterRoute,
  settings?: ServerConnection.ISettings
): Promise<ICluster> {
  const reply = await requestAPI<{ cluster: ICluster }>(
    clusterPath(route, 'keep-running'),
    { method: 'POST', body: '{}' },
    settings
  );
  return reply.cluster;
}

/**
 * Read a running cluster's GPU use now (`GET clusters/NAME/gpu-use`, a card
 * being opened). The server answers a reading of the last few seconds again,
 * and sends the reading to every open sidebar's event stream.
 */
export async function readGpuUse(
  route: IClusterRoute,
  settings?: ServerConnection.ISettings
): Promise<IGpuUse> {
  const reply = await requestAPI<{ name: string; gpu_use: IGpuUse }>(
    clusterPath(route, 'gpu-use'),
    { method: 'GET' },
    settings
  );
  return reply.gpu_use;
}

/**
 * Read a running cluster's Serve apps now (`GET clusters/NAME/apps`, from its
 * dashboard): a card opened, and every few seconds while it stays open. The
 * server sends the reading to every open sidebar's event stream too.
 */
export async function readServeApps(
  route: IClusterRoute,
  settings?: ServerConnection.ISettings
): Promise<IServeApps> {
  const reply = await requestAPI<{ name: string; serve: IServeApps }>(
    clusterPath(route, 'apps'),
    { method: 'GET' },
    settings
  );
  return reply.serve;
}

/** GPU-hours per user and GPU type (`GET usage`), and per cluster uid. */
export interface IUsage {
  since: number;
  until: number;
  users: {
    owner: string;
    gpu_type: string;
    clusters: number;
    gpu_hours: number;
  }[];
  clusters: Record<string, number>;
  gpu_hours: number;
}

export async function fetchUsage(
  sinceDays: number,
  all: boolean,
  settings?: ServerConnection.ISettings
): Promise<IUsage> {
  const query = `usage?since=${sinceDays}d${all ? '&all=1' : ''}`;
  return requestAPI<IUsage>(query, { method: 'GET' }, settings);
}

export async function deleteCluster(
  route: IClusterRoute,
  settings?: ServerConnection.ISettings
): Promise<void> {
  await requestAPI<undefined>(
    clusterPath(route),
    { method: 'DELETE' },
    settings
  );
}

export async function fetchLogs(
  route: IClusterRoute,
  tail: number,
  settings?: ServerConnection.ISettings
): Promise<string> {
  const reply = await requestAPI<{ name: string; logs: string }>(
    `${clusterPath(route, 'logs')}?tail=${tail}`,
    { method: 'GET' },
    settings
  );
  return reply.logs;
}

/** A Ray job's state (Ray's `JobStatus`). */
export type JobStatus =
  'PENDING' | 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'STOPPED';

/** One Ray Job on a cluster (`raylab/jobs/api.py`, `Job.to_json`). */
export interface IJob {
  /** The submission id (`%%raycluster job NAME`). */
  name: string;
  cluster: string;
  status: JobStatus;
  /** Epoch seconds; null while it waits to start. */
  started: number | null;
  /** Epoch seconds; null until it ends. */
  ended: number | null;
  /** Ray's word on it (why it failed, for one). */
  message: string;
  /** The cell it was made from, e.g. `<job train: analysis.ipynb, In [4]>`; or ''. */
  cell: string;
}

/** The cluster's Ray Jobs (its owner's only), oldest first. */
export async function fetchJobs(
  route: IClusterRoute,
  settings?: ServerConnection.ISettings
): Promise<IJob[]> {
  const reply = await requestAPI<{ name: string; jobs: IJob[] }>(
    clusterPath(route, 'jobs'),
    { method: 'GET' },
    settings
  );
  return reply.jobs;
}

/** The whole log of one job. */
export async function fetchJobLogs(
  route: IClusterRoute,
  job: string,
  settings?: ServerConnection.ISettings
): Promise<string> {
  const reply = await requestAPI<{ name: string; job: string; logs: string }>(
    clusterPath(route, 'jobs', encodeURIComponent(job), 'logs'),
    { method: 'GET' },
    settings
  );
  return reply.logs;
}

/**
 * The path of the cluster's proxied Ray dashboard, below the server's base
 * URL; null when this server has no dashboard for it.
 */
export function dashboardPath(cluster: ICluster): string | null {
  if (cluster.dashboard_path === undefined) {
    const route = { name: cluster.name, namespace: null };
    return `raylab/${clusterPath(route)}/dashboard/`;
  }
  return cluster.dashboard_path;
}
