import { MainAreaWidget } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import {
  ReactWidget,
  ToolbarButton,
  refreshIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import { describeError } from './api';
import { IClusterRoute, fetchJobLogs, fetchLogs } from './clusterApi';

/** The log text, kept scrolled to its end as `tail -f` readers expect. */
function LogText(props: { text: string; label: string }): React.ReactElement {
  const ref = React.useRef<HTMLPreElement>(null);
  React.useLayoutEffect(() => {
    if (ref.current) {
      ref.current.scrollTop = ref.current.scrollHeight;
    }
  }, [props.text]);
  return (
    <pre
      ref={ref}
      className="jp-raylab-logs-text"
      tabIndex={0}
      aria-label={props.label}
    >
      {props.text}
    </pre>
  );
}

/**
 * Where a log panel gets its text, and how it names it.
 */
export interface ILogSource {
  /** The log's text, fetched again on each refresh. */
  fetch(): Promise<string>;
  /** The status line before "as of HH:MM:SS", e.g. "Last 500 lines of the head's log". */
  readonly description: string;
  /** The accessible name of the text, e.g. "Log of exp". */
  readonly label: string;
}

/**
 * A log (a cluster head's, or one of its Ray jobs'), with a refresh button.
 * Refreshed on request, not on a timer.
 */
export class LogsView extends ReactWidget {
  constructor(readonly source: ILogSource) {
    super();
    this.addClass('jp-raylab-logs');
  }

  async refresh(): Promise<void> {
    this._loading = true;
    this.update();
    try {
      this._text = await this.source.fetch();
      this._error = null;
      this._fetchedAt = new Date();
    } catch (reason) {
      this._error = describeError(reason);
    } finally {
      this._loading = false;
      this.update();
    }
  }

  protected render(): React.ReactElement {
    return (
      <div className="jp-raylab-logs-body">
        <div className="jp-raylab-logs-status" aria-live="polite">
          {this._loading
            ? 'Loading…'
            : this._error
              ? null
              : this.source.description +
                (this._fetchedAt
                  ? `, as of ${this._fetchedAt.toLocaleTimeString()}`
                  : '')}
        </div>
        {this._error && (
          <div className="jp-raylab-form-error" role="alert">
            {this._error}
          </div>
        )}
        <LogText text={this._text} label={this.source.label} />
      </div>
    );
  }

  private _text = '';
  private _error: string | null = null;
  private _loading = false;
  private _fetchedAt: Date | null = null;
}

function createPanel(
  source: ILogSource,
  title: string,
  what: string
): MainAreaWidget<LogsView> {
  const content = new LogsView(source);
  const panel = new MainAreaWidget({ content });
  panel.title.label = title;
  panel.title.closable = true;
  panel.toolbar.addItem(
    'refresh',
    new ToolbarButton({
      icon: refreshIcon,
      label: 'Refresh',
      tooltip: `Fetch the log of ${what} again`,
      onClick: () => void content.refresh()
    })
  );
  void content.refresh();
  return panel;
}

/**
 * The head's log of one cluster (`GET clusters/<name>/logs?tail=N`, or
 * `namespaces/<ns>/clusters/<name>/logs` for one in another namespace).
 *
 * @param name - "exp", or "exp (ray-bob)" for a cluster in another namespace
 */
export function createLogsPanel(
  route: IClusterRoute,
  name: string,
  settings: ServerConnection.ISettings,
  tail: number
): MainAreaWidget<LogsView> {
  const source: ILogSource = {
    fetch: () => fetchLogs(route, tail, settings),
    description: `Last ${tail} lines of the head's log`,
    label: `Log of ${name}`
  };
  return createPanel(source, `Ray logs: ${name}`, name);
}

/**
 * The whole log of one Ray job (`GET clusters/<name>/jobs/<job>/logs`).
 *
 * @param name - the cluster's name as shown (see {@link createLogsPanel})
 */
export function createJobLogsPanel(
  route: IClusterRoute,
  name: string,
  job: string,
  settings: ServerConnection.ISettings
): MainAreaWidget<LogsView> {
  const source: ILogSource = {
    fetch: () => fetchJobLogs(route, job, settings),
    description: `Log of job ${job}`,
    label: `Log of job ${job} on ${name}`
  };
  return createPanel(source, `Ray job: ${job} (${name})`, `job ${job}`);
}
