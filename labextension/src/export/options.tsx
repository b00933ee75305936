import { Dialog, showDialog } from '@jupyterlab/apputils';
import { ReactWidget } from '@jupyterlab/ui-components';
import React from 'react';

import { FOCUSED_FIELD } from '../formDialog';

/** What the options dialog asks; empty strings leave the server's defaults. */
export interface IExportChoices {
  name: string;
  cluster: string;
  schedule: string;
  cells: '' | 'tagged' | 'all';
}

const DEFAULT_SCHEDULE = '0 3 * * *';

function OptionsForm(props: {
  pipeline: string;
  clusters: string[];
  initial: IExportChoices;
  onChange: (choices: IExportChoices) => void;
}): React.ReactElement {
  const [v, setValues] = React.useState(props.initial);
  const set = (patch: Partial<IExportChoices>): void => {
    const next = { ...v, ...patch };
    setValues(next);
    props.onChange(next);
  };
  const id = (field: string): string => `jp-raylab-export-${field}`;
  return (
    <form className="jp-raylab-export-form" onSubmit={e => e.preventDefault()}>
      <div className="jp-raylab-field">
        <label htmlFor={id('name')}>Pipeline name</label>
        <input
          id={id('name')}
          className="jp-mod-styled"
          type="text"
          placeholder={props.pipeline}
          autoFocus // see FOCUSED_FIELD
          autoComplete="off"
          spellCheck={false}
          value={v.name}
          onChange={e => set({ name: e.target.value })}
        />
      </div>
      <div className="jp-raylab-field">
        <label htmlFor={id('cluster')}>Runs on a cluster like</label>
        <select
          id={id('cluster')}
          className="jp-mod-styled"
          value={v.cluster}
          onChange={e => set({ cluster: e.target.value })}
        >
          <option value="">raylab’s default cluster spec</option>
          {props.clusters.map(name => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
      </div>
      <div className="jp-raylab-field">
        <label htmlFor={id('schedule')}>Schedule (cron, UTC)</label>
        <input
          id={id('schedule')}
          className="jp-mod-styled"
          type="text"
          placeholder={`${DEFAULT_SCHEDULE} (daily at 03:00)`}
          autoComplete="off"
          spellCheck={false}
          value={v.schedule}
          onChange={e => set({ schedule: e.target.value })}
        />
      </div>
      <div className="jp-raylab-field">
        <label htmlFor={id('cells')}>Cells</label>
        <select
          id={id('cells')}
          className="jp-mod-styled"
          value={v.cells}
          onChange={e =>
            set({ cells: e.target.value as IExportChoices['cells'] })
          }
        >
          <option value="">Tagged cells if any are tagged, else all</option>
          <option value="tagged">Only cells tagged export or step:NAME</option>
          <option value="all">Every code cell (except no-export)</option>
        </select>
      </div>
    </form>
  );
}

class OptionsBody
  extends ReactWidget
  implements Dialog.IBodyWidget<IExportChoices>
{
  constructor(
    private readonly _pipeline: string,
    private readonly _clusters: string[]
  ) {
    super();
    this.addClass('jp-raylab-export-options');
  }

  getValue(): IExportChoices {
    return this._choices;
  }

  protected render(): React.ReactElement {
    return (
      <OptionsForm
        pipeline={this._pipeline}
        clusters={this._clusters}
        initial={this._choices}
        onChange={choices => {
          this._choices = choices;
        }}
      />
    );
  }

  private _choices: IExportChoices = {
    name: '',
    cluster: '',
    schedule: '',
    cells: ''
  };
}

/**
 * Ask how to export `notebook` (name, cluster, schedule, cells). Resolves to
 * null when the user cancels.
 */
export async function askExportOptions(
  notebook: string,
  clusters: string[]
): Promise<IExportChoices | null> {
  // The server's own default, shown as a hint: `Train Model.ipynb` -> train_model.
  const pipeline = notebook
    .replace(/\.ipynb$/, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '_')
    .replace(/^_+|_+$/g, '');
  const result = await showDialog({
    title: `Export ${notebook} to a pipeline`,
    body: new OptionsBody(pipeline, clusters),
    buttons: [Dialog.cancelButton(), Dialog.okButton({ label: 'Export' })],
    focusNodeSelector: FOCUSED_FIELD
  });
  return result.button.accept ? result.value : null;
}
