import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  Clipboard,
  Dialog,
  IFrame,
  MainAreaWidget,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { URLExt } from '@jupyterlab/coreutils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { KernelMessage, ServerConnection } from '@jupyterlab/services';
import React from 'react';

import { describeError } from './api';
import {
  ICluster,
  dashboardPath,
  deleteCluster,
  keepRunning,
  patchCluster
} from './clusterApi';
import { showCreateDialog, errorsFromFailure } from './createDialog';
import { FormBody, FormDialog } from './formDialog';
import { createLogsPanel } from './logs';
import { ClusterListModel } from './model';
import { IProfilesReply, fetchProfiles } from './profiles';
import { connectCode, gpusText } from './render';

/** The user's settings (`schema/plugin.json`). */
export interface IRaylabConfig {
  defaultGpuType: string;
  confirmDelete: boolean;
  logTail: number;
  showAllByDefault: boolean;
}

export const DEFAULT_CONFIG: IRaylabConfig = {
  defaultGpuType: '',
  confirmDelete: true,
  logTail: 500,
  showAllByDefault: false
};

/** What every action needs. */
export interface IRaylabContext {
  app: JupyterFrontEnd;
  model: ClusterListModel;
  serverSettings: ServerConnection.ISettings;
  notebooks: INotebookTracker | null;
  config: IRaylabConfig;
}

/** An error whose message is meant for the user as it is. */
export class UserError extends Error {}

export function clusterOrThrow(ctx: IRaylabContext, name: string): ICluster {
  const cluster = ctx.model.get(name);
  if (!cluster) {
    throw new UserError(
      `No cluster named ${name} (it may just have been deleted).`
    );
  }
  return cluster;
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
  name: string
): Promise<string> {
  clusterOrThrow(ctx, name);
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

export function copyConnectCode(ctx: IRaylabContext, name: string): void {
  const cluster = clusterOrThrow(ctx, name);
  Clipboard.copyToSystem(connectCode(cluster));
  Notification.info(`Copied the code that connects a notebook to ${name}.`, {
    autoClose: 3000
  });
}

const dashboards = new Map<string, MainAreaWidget<IFrame>>();

/** The Ray dashboard through the server's authenticated proxy, in a tab. */
export function openDashboard(ctx: IRaylabContext, name: string): void {
  const cluster = clusterOrThrow(ctx, name);
  const open = dashboards.get(name);
  if (open && !open.isDisposed) {
    ctx.app.shell.activateById(open.id);
    return;
  }
  let url = URLExt.join(ctx.serverSettings.baseUrl, dashboardPath(cluster));
  if (!url.endsWith('/')) {
    url += '/';
  }
  // Same origin, so Jupyter's cookie authenticates the frames; scripts and
  // same-origin are what the dashboard's single-page app needs.
  const content = new IFrame({
    sandbox: [
      'allow-scripts',
      'allow-same-origin',
      'allow-forms',
      'allow-downloads',
      'allow-popups'
    ],
    referrerPolicy: 'same-origin'
  });
  content.url = url;
  content.addClass('jp-raylab-dashboard');
  const widget = new MainAreaWidget({ content });
  widget.id = `raylab-dashboard-${name}`;
  widget.title.label = `Ray dashboard: ${name}`;
  widget.title.closable = true;
  dashboards.set(name, widget);
  widget.disposed.connect(() => dashboards.delete(name));
  ctx.app.shell.add(widget, 'main');
  ctx.app.shell.activateById(widget.id);
}

export function showLogs(ctx: IRaylabContext, name: string): void {
  clusterOrThrow(ctx, name);
  const id = `raylab-logs-${name}`;
  for (const widget of ctx.app.shell.widgets('main')) {
    if (widget.id === id) {
      ctx.app.shell.activateById(id);
      return;
    }
  }
  const panel = createLogsPanel(name, ctx.serverSettings, ctx.config.logTail);
  ctx.app.shell.add(panel, 'main', { mode: 'split-bottom' });
  ctx.app.shell.activateById(panel.id);
}

export async function setSuspended(
  ctx: IRaylabContext,
  name: string,
  suspend: boolean
): Promise<void> {
  clusterOrThrow(ctx, name);
  ctx.model.upsert(await patchCluster(name, { suspend }, ctx.serverSettings));
}

/** Restart an idle cluster's clock (the warning's Keep running). */
export async function keepClusterRunning(
  ctx: IRaylabContext,
  name: string
): Promise<void> {
  clusterOrThrow(ctx, name);
  ctx.model.upsert(await keepRunning(name, ctx.serverSettings));
}

/**
 * Ask (unless the user turned confirmation off), then delete.
 *
 * @returns whether the cluster was deleted
 */
export async function deleteWithConfirm(
  ctx: IRaylabContext,
  name: string
): Promise<boolean> {
  const cluster = clusterOrThrow(ctx, name);
  if (ctx.config.confirmDelete) {
    const workers = cluster.workers_desired;
    const plural = (n: number, word: string): string =>
      `${n} ${word}${n === 1 ? '' : 's'}`;
    const gpus = cluster.gpus ? ` (${gpusText(cluster)} GPUs)` : '';
    const result = await showDialog({
      title: `Delete cluster ${name}?`,
      body:
        `This stops the head and ${plural(workers, 'worker')}${gpus} of ${name}, ` +
        'and everything running on them. Kernels connected to it lose their connection.',
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
  await deleteCluster(name, ctx.serverSettings);
  ctx.model.remove(name);
  return true;
}

class ScaleBody extends FormBody<ICluster | null> {
  constructor(
    private readonly _cluster: ICluster,
    private readonly _settings: ServerConnection.ISettings
  ) {
    super();
    this._workers = String(_cluster.workers_desired);
  }

  async submit(): Promise<boolean> {
    const text = this._workers.trim();
    try {
      this._result = await patchCluster(
        this._cluster.name,
        { workers: /^\d+$/.test(text) ? Number(text) : text },
        this._settings
      );
      return true;
    } catch (reason) {
      const errors = errorsFromFailure(reason);
      this._error =
        errors.fields.workers ?? errors.form ?? describeError(reason);
      this.update();
      return false;
    }
  }

  getValue(): ICluster | null {
    return this._result;
  }

  protected render(): React.ReactElement {
    const c = this._cluster;
    const perWorker = c.spec.workers ? c.spec.gpus / c.spec.workers : 0;
    const hint = perWorker
      ? `Each worker keeps ${perWorker} ${c.spec.gpu_type} GPU${perWorker === 1 ? '' : 's'}`
      : `Each worker keeps ${c.spec.cpus} CPU · ${c.spec.memory} memory`;
    return (
      <form
        className="jp-raylab-create-form"
        onSubmit={e => e.preventDefault()}
      >
        <div
          className={`jp-raylab-field${this._error ? ' jp-raylab-mod-invalid' : ''}`}
        >
          <label htmlFor="jp-raylab-scale-workers">Workers</label>
          <input
            id="jp-raylab-scale-workers"
            className="jp-mod-styled"
            type="text"
            inputMode="numeric"
            defaultValue={this._workers}
            aria-invalid={this._error ? true : undefined}
            aria-describedby="jp-raylab-scale-note"
            onChange={e => {
              this._workers = e.target.value;
            }}
          />
          <div id="jp-raylab-scale-note" className="jp-raylab-field-hint">
            {hint}
          </div>
          {this._error && (
            <div className="jp-raylab-field-error" role="alert">
              {this._error}
            </div>
          )}
        </div>
      </form>
    );
  }

  private _workers: string;
  private _error: string | null = null;
  private _result: ICluster | null = null;
}

export async function scaleCluster(
  ctx: IRaylabContext,
  name: string
): Promise<void> {
  const cluster = clusterOrThrow(ctx, name);
  const dialog = new FormDialog<ICluster | null>({
    title: `Scale ${name}`,
    body: new ScaleBody(cluster, ctx.serverSettings),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Scale' })],
    focusNodeSelector: 'input'
  });
  const result = await dialog.launch();
  dialog.dispose();
  if (result.button.accept && result.value) {
    ctx.model.upsert(result.value);
  }
}
