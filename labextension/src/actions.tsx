import {
  Clipboard,
  Dialog,
  IFrame,
  MainAreaWidget,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { KernelMessage } from '@jupyterlab/services';

import { describeError } from './api';
import {
  ICluster,
  IClusterRoute,
  clusterKey,
  clusterRoute,
  dashboardPath,
  deleteCluster,
  keepRunning,
  patchCluster
} from './clusterApi';
import { IRaylabContext, UserError } from './context';
import { showCreateDialog } from './createDialog';
import { LogsView, createJobLogsPanel, createLogsPanel } from './logs';
import { IProfilesReply, fetchProfiles } from './profiles';
import { connectCode, gpusText } from './render';

/**
 * The cluster `name` in `namespace`; without a namespace, the one of that
 * name in the server's home namespace (or the only one of that name).
 */
export async function findCluster(
  ctx: IRaylabContext,
  name: string,
  namespace?: string | null
): Promise<ICluster | undefined> {
  if (namespace !== undefined) {
    return ctx.model.get(clusterKey({ name, namespace }));
  }
  const home = await ctx.home;
  const named = ctx.model.clusters.filter(c => c.name === name);
  return (
    named.find(c => c.namespace === null || c.namespace === home) ??
    (named.length === 1 ? named[0] : undefined)
  );
}

export async function clusterOrThrow(
  ctx: IRaylabContext,
  name: string,
  namespace?: string | null
): Promise<ICluster> {
  const cluster = await findCluster(ctx, name, namespace);
  if (!cluster) {
    const where = namespace ? ` in namespace ${namespace}` : '';
    throw new UserError(
      `No cluster named ${name}${where} (it may just have been deleted).`
    );
  }
  return cluster;
}

/** Where the REST API finds `cluster` from this server. */
export async function routeOf(
  ctx: IRaylabContext,
  cluster: ICluster
): Promise<IClusterRoute> {
  return clusterRoute(cluster, await ctx.home);
}

/** "exp", or "exp (ray-bob)" for a cluster outside the home namespace. */
export function displayName(cluster: ICluster, route: IClusterRoute): string {
  return route.namespace === null
    ? cluster.name
    : `${cluster.name} (${route.namespace})`;
}

/** Show a failed action as an error notification. */
export function reportFailure(what: string, reason: unknown): void {
  const text =
    reason instanceof UserError ? reason.message : describeError(reason);
  Notification.error(`${what}: ${text}`, { autoClose: 10000 });
}

export async function newCluster(
  ctx: IRaylabContext
): Promise<ICluster | null> {
  let profiles: IProfilesReply;
  try {
    profiles = await fetchProfiles(ctx.serverSettings);
  } catch (reason) {
    reportFailure('Cannot open the New cluster dialog', reason);
    return null;
  }
  const result = await showCreateDialog(
    profiles,
    ctx.serverSettings,
    ctx.config.defaultGpuType
  );
  if (!result) {
    return null;
  }
  ctx.model.upsert(result.cluster);
  if (result.existed) {
    Notification.info(
      `You already have a cluster named ${result.cluster.name}; it is shown in the Ray clusters panel.`,
      { autoClose: 6000 }
    );
  }
  return result.cluster;
}

/**
 * Run `%load_ext raylab` and `%raycluster connect NAME` in the active
 * notebook's kernel, as a user would in a cell (the output does not go into
 * the notebook). Resolves with the magic's own message.
 */
export async function connectNotebook(
  ctx: IRaylabContext,
  cluster: ICluster
): Promise<string> {
  const name = cluster.name;
  if ((await routeOf(ctx, cluster)).namespace !== null) {
    throw new UserError(
      `${name} is in namespace ${cluster.namespace}: a notebook connects to clusters of its own namespace only.`
    );
  }
  const panel = ctx.notebooks?.currentWidget;
  if (!panel) {
    throw new UserError(
      'Open a notebook first: Connect runs %raycluster connect in the active notebook’s kernel.'
    );
  }
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session?.kernel;
  if (!kernel) {
    throw new UserError(
      `${panel.title.label} has no kernel; select one first.`
    );
  }
  const future = kernel.requestExecute({
    code: `%load_ext raylab\n%raycluster connect ${name}`,
    silent: false,
    store_history: false,
    stop_on_error: true
  });
  const out: string[] = [];
  const err: string[] = [];
  future.onIOPub = (msg: KernelMessage.IIOPubMessage): void => {
    if (KernelMessage.isStreamMsg(msg)) {
      (msg.content.name === 'stderr' ? err : out).push(msg.content.text);
    } else if (KernelMessage.isErrorMsg(msg)) {
      err.push(`${msg.content.ename}: ${msg.content.evalue}`);
    }
  };
  const reply = await future.done;
  const content = reply.content;
  if (content.status !== 'ok') {
    const evalue = content.status === 'error' ? content.evalue : '';
    // A UsageError arrives as stderr text ("UsageError: ...") plus the reply's evalue.
    const text =
      evalue ||
      stripUsagePrefix(err.join('').trim()) ||
      'the kernel reported an error';
    throw new UserError(text);
  }
  const message = out
    .join('')
    .split('\n')
    .filter(
      line => line.trim() && !line.includes('extension is already loaded')
    )
    .join(' ');
  return message || `Connected ${panel.title.label} to ${name}.`;
}

function stripUsagePrefix(text: string): string {
  return text.replace(/^UsageError:\s*/, '');
}

export function copyConnectCode(cluster: ICluster): void {
  Clipboard.copyToSystem(connectCode(cluster));
  Notification.info(
    `Copied the code that connects a notebook to ${cluster.name}.`,
    {
      autoClose: 3000
    }
  );
}

const dashboards = new Map<string, MainAreaWidget<IFrame>>();

/** The Ray dashboard through the server's authenticated proxy, in a tab. */
export function openDashboard(ctx: IRaylabContext, cluster: ICluster): void {
  const name = cluster.name;
  const path = dashboardPath(cluster);
  if (path === null) {
    throw new UserError(
      `This server has no dashboard for ${name} (namespace ${cluster.namespace}): its owner's server has.`
    );
  }
  const key = clusterKey(cluster);
  const open = dashboards.get(key);
  if (open && !open.isDisposed) {
    ctx.app.shell.activateById(open.id);
    return;
  }
  let url = URLExt.join(ctx.serverSettings.baseUrl, path);
  if (!url.endsWith('/')) {
    url += '/';
  }
  // Never allow-same-origin: the head serves the page, and in Jupyter's origin its
  // scripts could act as this user. The server sandboxes it too, and sends the
  // frame on to a key for this dashboard, since a sandboxed page has no cookie.
  const content = new IFrame({
    sandbox: [
      'allow-scripts',
      'allow-forms',
      'allow-downloads',
      'allow-popups'
    ],
    referrerPolicy: 'same-origin'
  });
  content.url = url;
  content.addClass('jp-raylab-dashboard');
  const widget = new MainAreaWidget({ content });
  widget.id = `raylab-dashboard-${widgetSuffix(cluster)}`;
  widget.title.label = `Ray dashboard: ${name}`;
  widget.title.closable = true;
  dashboards.set(key, widget);
  widget.disposed.connect(() => dashboards.delete(key));
  ctx.app.shell.add(widget, 'main');
  ctx.app.shell.activateById(widget.id);
}

/**
 * A DOM id's suffix for the cluster: `name`, or `namespace_name` (`_` is in
 * neither a namespace nor a cluster name, so no two clusters share one).
 */
function widgetSuffix(cluster: ICluster): string {
  return cluster.namespace
    ? `${cluster.namespace}_${cluster.name}`
    : cluster.name;
}

export async function showLogs(
  ctx: IRaylabContext,
  cluster: ICluster
): Promise<void> {
  const id = `raylab-logs-${widgetSuffix(cluster)}`;
  for (const widget of ctx.app.shell.widgets('main')) {
    if (widget.id === id) {
      ctx.app.shell.activateById(id);
      return;
    }
  }
  const route = await routeOf(ctx, cluster);
  const panel = createLogsPanel(
    route,
    displayName(cluster, route),
    ctx.serverSettings,
    ctx.config.logTail
  );
  panel.id = id;
  ctx.app.shell.add(panel, 'main', { mode: 'split-bottom' });
  ctx.app.shell.activateById(panel.id);
}

/**
 * The log of one of the cluster's Ray jobs in a panel (one per job: an open
 * one is brought to the front and fetched again).
 */
export async function showJobLogs(
  ctx: IRaylabContext,
  cluster: ICluster,
  job: string
): Promise<void> {
  const id = `raylab-job-log-${widgetSuffix(cluster)}-${job}`;
  for (const widget of ctx.app.shell.widgets('main')) {
    if (widget.id === id) {
      ctx.app.shell.activateById(id);
      if (
        widget instanceof MainAreaWidget &&
        widget.content instanceof LogsView
      ) {
        void widget.content.refresh();
      }
      return;
    }
  }
  const route = await routeOf(ctx, cluster);
  const panel = createJobLogsPanel(
    route,
    displayName(cluster, route),
    job,
    ctx.serverSettings
  );
  panel.id = id;
  ctx.app.shell.add(panel, 'main', { mode: 'split-bottom' });
  ctx.app.shell.activateById(panel.id);
}

export async function setSuspended(
  ctx: IRaylabContext,
  cluster: ICluster,
  suspend: boolean
): Promise<void> {
  const route = await routeOf(ctx, cluster);
  ctx.model.upsert(await patchCluster(route, { suspend }, ctx.serverSettings));
}

/** Restart an idle cluster's clock (the warning's Keep running). */
export async function keepClusterRunning(
  ctx: IRaylabContext,
  cluster: ICluster
): Promise<void> {
  const route = await routeOf(ctx, cluster);
  ctx.model.upsert(await keepRunning(route, ctx.serverSettings));
}

/**
 * Ask (unless the user turned confirmation off), then delete.
 *
 * @returns whether the cluster was deleted
 */
export async function deleteWithConfirm(
  ctx: IRaylabContext,
  cluster: ICluster
): Promise<boolean> {
  const route = await routeOf(ctx, cluster);
  const name = displayName(cluster, route);
  if (ctx.config.confirmDelete) {
    const workers = cluster.workers_desired;
    const plural = (n: number, word: string): string =>
      `${n} ${word}${n === 1 ? '' : 's'}`;
    const gpus = cluster.gpus ? ` (${gpusText(cluster)} GPUs)` : '';
    const result = await showDialog({
      title: `Delete cluster ${name}?`,
      body:
        `This stops the head and ${plural(workers, 'worker')}${gpus} of ${name}` +
        (route.namespace === null ? '' : `, ${cluster.owner}'s cluster`) +
        ', and everything running on them. Kernels connected to it lose their connection.',
      buttons: [
        Dialog.cancelButton(),
        Dialog.warnButton({
          label: 'Delete',
          ariaLabel: `Delete cluster ${name}`
        })
      ],
      defaultButton: 0
    });
    if (!result.button.accept) {
      return false;
    }
  }
  await deleteCluster(route, ctx.serverSettings);
  ctx.model.remove(clusterKey(cluster));
  return true;
}
