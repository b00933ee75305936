/**
 * Words for clusters, the same as `raylab/display/render.py` uses in the magics, the
 * CLI and the notebook status card: "Pending — reason", "2 × a100 (logical)",
 * "1/2 ready", "4 CPU · 16Gi memory", kubectl-style ages.
 */
import type {
  ICluster,
  IEnvironment,
  IGpuUse,
  IQueueInfo,
  IServeApps,
  Phase
} from './clusterApi';

export function phaseText(
  cluster: ICluster,
  nowS: number = Date.now() / 1000
): string {
  const reason = [
    standbyText(cluster, nowS),
    suspendedText(cluster, nowS) || cluster.reason
  ]
    .filter(text => text)
    .join('; ');
  return reason ? `${cluster.phase} — ${reason}` : String(cluster.phase);
}

/** "standby until 14:05" for a standby, else '' (`render.standby_text`). */
export function standbyText(
  cluster: ICluster,
  nowS: number = Date.now() / 1000
): string {
  const until = cluster.standby_until ?? null;
  return until === null ? '' : `standby until ${clockText(until, nowS)}`;
}

/** 14:05 today, else Dec 01 14:05 (`render.clock_text`), local time. */
export function clockText(
  epochS: number,
  nowS: number = Date.now() / 1000
): string {
  const when = new Date(epochS * 1000);
  const today = new Date(nowS * 1000);
  const hm = `${String(when.getHours()).padStart(2, '0')}:${String(when.getMinutes()).padStart(2, '0')}`;
  if (when.toDateString() === today.toDateString()) {
    return hm;
  }
  const month = when.toLocaleString('en-US', { month: 'short' });
  return `${month} ${String(when.getDate()).padStart(2, '0')} ${hm}`;
}

/** 42 s, 50 min, 3 h 5 min (`render.duration_text`). */
function durationText(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) {
    return `${s} s`;
  }
  if (s < 3 * 3600) {
    return `${Math.floor(s / 60)} min`;
  }
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

/** Why the culler suspended it, or '' (`render.suspended_text`). */
export function suspendedText(
  cluster: ICluster,
  nowS: number = Date.now() / 1000
): string {
  const idle = cluster.idle;
  if (cluster.phase !== 'Suspended' || !idle || idle.suspended_at === null) {
    return '';
  }
  const after = durationText(
    idle.suspended_at - (idle.since ?? idle.suspended_at)
  );
  return `suspended after ${after} idle at ${clockText(idle.suspended_at, nowS)}`;
}

function running(cluster: ICluster): boolean {
  return cluster.phase === 'Ready' || cluster.phase === 'Degraded';
}

/**
 * "idle for 50 min; suspends at 14:05", "activity unknown since 14:05 (why)"
 * or '' (`render.idle_text`).
 */
export function idleText(cluster: ICluster, nowS: number): string {
  const idle = cluster.idle;
  if (!idle) {
    return '';
  }
  if (!running(cluster)) {
    return suspendedText(cluster, nowS);
  }
  if (idle.unknown_since !== null) {
    const why = idle.unknown_reason ? ` (${idle.unknown_reason})` : '';
    return `activity unknown since ${clockText(idle.unknown_since, nowS)}${why}`;
  }
  if (idle.since === null) {
    return '';
  }
  let text = `idle for ${durationText(nowS - idle.since)}`;
  if (idle.suspend_at !== null) {
    text += `; suspends at ${clockText(idle.suspend_at, nowS)}`;
  }
  return text;
}

/** Whether the owner has been warned that the cluster is about to be suspended. */
export function isWarned(cluster: ICluster): boolean {
  return running(cluster) && (cluster.idle?.suspend_at ?? null) !== null;
}

/** Seconds idle now, or null (for sorting the overview). */
export function idleSeconds(cluster: ICluster, nowS: number): number | null {
  const since = cluster.idle?.since ?? null;
  return running(cluster) && since !== null ? Math.max(0, nowS - since) : null;
}

/** "12.5 GPU-h" */
export function gpuHoursText(hours: number): string {
  return `${hours < 10 ? hours.toFixed(1) : Math.round(hours)} GPU-h`;
}

export function gpusText(cluster: ICluster): string {
  if (!cluster.spec.gpus) {
    return 'none';
  }
  const text = `${cluster.gpus} × ${cluster.spec.gpu_type}`;
  return cluster.logical_gpus ? `${text} (logical)` : text;
}

/**
 * Whether there are GPU figures to show (`GpuUse.measured`): a reading with
 * no GPU in it is no evidence, never "0 % used".
 */
export function gpuMeasured(use: IGpuUse): boolean {
  return use.state === 'measured' && use.count > 0;
}

/**
 * Half up, the rule `render.gpu_use_text` follows too: not Python's `round`
 * (half to even), so that 44.5 % is 45 % on both cards (card_rows.json pins it).
 */
export function roundHalfUp(x: number): number {
  return Math.floor(x + 0.5);
}

/**
 * "87% · 61/160 GiB · 2 of 2 busy", or "—, logical GPUs" when not measured
 * (`render.gpu_use_text`).
 */
export function gpuUseText(use: IGpuUse): string {
  if (!gpuMeasured(use)) {
    return `—, ${use.why || 'not measured'}`;
  }
  const used = roundHalfUp(use.memory_used_mib / 1024);
  const total = roundHalfUp(use.memory_total_mib / 1024);
  return (
    `${roundHalfUp(use.utilization)}% · ${used}/${total} GiB · ` +
    `${use.busy} of ${use.count} busy`
  );
}

/** GPUs busy now, or null when not measured (the overview's "GPUs used"). */
export function usedGpus(cluster: ICluster): number | null {
  const use = cluster.gpu_use;
  return use && gpuMeasured(use) ? use.busy : null;
}

/**
 * GPUs held but not busy, or null when not measured. Never below 0: the nodes
 * may report more GPUs than the cluster asked for (a whole node's).
 */
export function idleGpus(cluster: ICluster): number | null {
  const used = usedGpus(cluster);
  return used === null ? null : Math.max(0, cluster.gpus - used);
}

function workersText(cluster: ICluster): string {
  return `${cluster.workers_ready}/${cluster.workers_desired}`;
}

function perWorkerText(cluster: ICluster): string {
  return `${cluster.spec.cpus} CPU · ${cluster.spec.memory} memory`;
}

/**
 * 1.5 KiB, 3.2 MiB (`raylab.workdir.format_size`): one decimal, rounded half up
 * in integers, so both cards agree to the last digit.
 */
function formatSize(size: number): string {
  if (size < 1024) {
    return `${size} B`;
  }
  let unit = 1024;
  let tenths = 0;
  let name = 'KiB';
  for (name of ['KiB', 'MiB', 'GiB', 'TiB']) {
    tenths = Math.floor((size * 20 + unit) / (2 * unit));
    if (tenths < 10240 || name === 'TiB') {
      break;
    }
    unit *= 1024;
  }
  return `${Math.floor(tenths / 10)}.${tenths % 10} ${name}`;
}

function count(n: number, what: string): string {
  return `${n} ${what}${n === 1 ? '' : 's'}`;
}

/**
 * "working dir 3.2 MiB · 4 pip packages · 2 env vars"
 * (`render.environment_text`).
 */
function environmentText(env: IEnvironment): string {
  const parts: string[] = [];
  if (env.working_dir !== null) {
    parts.push(`working dir ${formatSize(env.working_dir_bytes)}`);
  }
  const local = env.local_packages.length + env.wheels.length;
  if (local) {
    parts.push(count(local, 'local package'));
  }
  if (env.pip.length) {
    parts.push(count(env.pip.length, 'pip package'));
  }
  if (env.env_names.length) {
    parts.push(count(env.env_names.length, 'env var'));
  }
  return parts.join(' · ') || 'nothing synced';
}

/** kubectl-style ages: 42s, 7m, 3h, 5d (`raylab.model.format_age`). */
function formatAge(seconds: number): string {
  const s = Math.max(0, Math.floor(seconds));
  if (s < 120) {
    return `${s}s`;
  }
  if (s < 2 * 3600) {
    return `${Math.floor(s / 60)}m`;
  }
  if (s < 2 * 86400) {
    return `${Math.floor(s / 3600)}h`;
  }
  return `${Math.floor(s / 86400)}d`;
}

/** Options of {@link cardFields}. */
export interface ICardOptions {
  /** The admins' view: an "Owner" row. */
  withOwner?: boolean;
  /** While `up` waits (epoch seconds): "Elapsed" replaces "Age". */
  startedS?: number;
}

/**
 * The card's rows, in order, as `render.card_fields` makes them: the sidebar,
 * the notebook card and the terminal card show the same rows in the same words
 * (tests/packaging/card_rows.json holds clusters and the rows both make).
 *
 * @param nowS - the current time in epoch seconds
 */
export function cardFields(
  cluster: ICluster,
  nowS: number,
  options: ICardOptions = {}
): [string, string][] {
  const fields: [string, string][] = [
    ['Phase', phaseText(cluster, nowS)],
    ['Workers', `${workersText(cluster)} ready`]
  ];
  if (cluster.spec.max_workers !== null) {
    const low = cluster.spec.min_workers ?? 0;
    fields.push(['Autoscaling', `${low}–${cluster.spec.max_workers} workers`]);
  }
  fields.push(['GPUs', gpusText(cluster)]);
  // Older servers send no gpu_use, newer ones null until it was read.
  if (cluster.gpu_use) {
    fields.push(['GPU use', gpuUseText(cluster.gpu_use)]);
  }
  fields.push(['Per worker', perWorkerText(cluster)]);
  if (options.startedS !== undefined) {
    const elapsed = Math.max(0, nowS - options.startedS);
    fields.push(['Elapsed', `${Math.floor(elapsed)}s`]);
  } else {
    fields.push(['Age', formatAge(nowS - cluster.created)]);
  }
  if (options.withOwner) {
    fields.push(['Owner', cluster.owner]);
  }
  if (cluster.queue) {
    fields.push(['Queue', queueText(cluster.queue)]);
  }
  if (cluster.ray_version) {
    fields.push([
      'Ray',
      `${cluster.ray_version} · Python ${cluster.python_version || '?'}`
    ]);
  }
  if (cluster.environment) {
    fields.push(['Environment', environmentText(cluster.environment)]);
  }
  const connection = connectionText(cluster);
  if (connection) {
    fields.push(['Connection', connection]);
  }
  // Older servers send no serve; a cluster that never ran Serve has no row.
  if (cluster.serve && cluster.serve.state !== 'none') {
    fields.push(['Serve', serveText(cluster.serve)]);
  }
  const idle = idleText(cluster, nowS);
  if (idle && !suspendedText(cluster, nowS)) {
    fields.push(['Idle', idle]);
  }
  return fields;
}

/** Serve's statuses of an app that does not serve (`serving.model.FAILED_STATUSES`). */
export const SERVE_FAILED: ReadonlySet<string> = new Set([
  'DEPLOY_FAILED',
  'UNHEALTHY'
]);

/**
 * The card's Serve row (`serving.model.serve_text`): "2 apps · 1 running",
 * "1 app · 0 running · 1 failed", "no apps", "unknown — why".
 */
export function serveText(serve: IServeApps): string {
  if (serve.state === 'unknown') {
    return serve.why ? `unknown — ${serve.why}` : 'unknown';
  }
  const n = serve.apps.length;
  if (!n) {
    return 'no apps';
  }
  const running = serve.apps.filter(a => a.status === 'RUNNING').length;
  const parts = [count(n, 'app'), `${running} running`];
  const failed = serve.apps.filter(a => SERVE_FAILED.has(a.status)).length;
  if (failed) {
    parts.push(`${failed} failed`);
  }
  return parts.join(' · ');
}

/** The card's Queue row (`render.queue_text`): which queue, at what priority. */
export function queueText(queue: IQueueInfo): string {
  let text = queue.cluster_queue
    ? `${queue.name} → ${queue.cluster_queue}`
    : queue.name;
  if (queue.priority) {
    text += ` · priority ${queue.priority}`;
  }
  return text;
}

/** What to type in another notebook to use this cluster (`render.connect_code`). */
export function connectCode(cluster: ICluster): string {
  return (
    `%load_ext raylab\n%raycluster connect ${cluster.name}\n` +
    `# or, in a shell holding what \`raylab env ${cluster.name}\` prints: ` +
    `ray.init("${cluster.endpoints.client}")`
  );
}

/** Phases in which the cluster runs processes (or pods) that can be suspended. */
export function canSuspend(phase: Phase): boolean {
  return phase !== 'Suspended' && phase !== 'Deleting';
}

/** How a kernel on this server reaches the cluster (render.connection_text). */
export function connectionText(cluster: ICluster): string {
  if (cluster.endpoints.gcs) {
    return `Ray driver at ${cluster.endpoints.gcs}`;
  }
  if (cluster.endpoints.client) {
    return `Ray Client at ${cluster.endpoints.client}`;
  }
  return '';
}

/** Phases in which a Ray Client connection can succeed. */
export function canConnect(cluster: ICluster): boolean {
  return (
    cluster.head_ready &&
    cluster.phase !== 'Suspended' &&
    cluster.phase !== 'Failed' &&
    cluster.phase !== 'Deleting'
  );
}
