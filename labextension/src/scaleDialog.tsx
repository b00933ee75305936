import { Dialog } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import React from 'react';

import { displayName, routeOf } from './actions';
import { describeError } from './api';
import { ICluster, IClusterRoute, patchCluster } from './clusterApi';
import { IRaylabContext } from './context';
import { errorsFromFailure } from './createDialog';
import { FormBody, FormDialog } from './formDialog';

class ScaleBody extends FormBody<ICluster | null> {
  constructor(
    private readonly _cluster: ICluster,
    private readonly _route: IClusterRoute,
    private readonly _settings: ServerConnection.ISettings
  ) {
    super();
    this._workers = String(_cluster.workers_desired);
  }

  async submit(): Promise<boolean> {
    const text = this._workers.trim();
    try {
      this._result = await patchCluster(
        this._route,
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
            autoFocus // see FOCUSED_FIELD
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
  cluster: ICluster
): Promise<void> {
  const route = await routeOf(ctx, cluster);
  const dialog = new FormDialog<ICluster | null>({
    title: `Scale ${displayName(cluster, route)}`,
    body: new ScaleBody(cluster, route, ctx.serverSettings),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Scale' })]
  });
  const result = await dialog.launch();
  dialog.dispose();
  if (result.button.accept && result.value) {
    ctx.model.upsert(result.value);
  }
}
