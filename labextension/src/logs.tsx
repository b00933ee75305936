import { MainAreaWidget } from '@jupyterlab/apputils';
import { ServerConnection } from '@jupyterlab/services';
import {
  ReactWidget,
  ToolbarButton,
  refreshIcon
} from '@jupyterlab/ui-components';
import React from 'react';

import { describeError } from './api';
import { IClusterRoute, fetchLogs } from './clusterApi';

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
 * The head's log of one cluster (`GET clusters/<name>/logs?tail=N`, or
 * `namespaces/<ns>/clusters/<name>/logs` for one in another namespace), with a
 * refresh button. Refreshed on request, not on a timer.
 */
export class LogsView extends ReactWidget {
  constructor(
    readonly route: IClusterRoute,
    /** "exp", or "exp (ray-bob)" for a cluster in another namespace. */
    readonly clusterName: string,
    private readonly _settings: ServerConnection.ISettings,
    private readonly _tail: number
  ) {
    super();
    this.addClass('jp-raylab-logs');
  }

  async refresh(): Promise<void> {
    this._loading = true;
    this.update();
    try {
      this._text = await fetchLogs(this.route, this._tail, this._settings);
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
              : `Last ${this._tail} lines of the head's log` +
                (this._fetchedAt
                  ? `, as of ${this._fetchedAt.toLocaleTimeString()}`
                  : '')}
        </div>
        {this._error && (
          <div className="jp-raylab-form-error" role="alert">
            {this._error}
          </div>
        )}
        <LogText text={this._text} label={`Log of ${this.clusterName}`} />
      </div>
    );
  }

  private _text = '';
  private _error: string | null = null;
  private _loading = false;
  private _fetchedAt: Date | null = null;
}

export function createLogsPanel(
  route: IClusterRoute,
  name: string,
  settings: ServerConnection.ISettings,
  tail: number
): MainAreaWidget<LogsView> {
  const content = new LogsView(route, name, settings, tail);
  const panel = new MainAreaWidget({ content });
  panel.title.label = `Ray logs: ${name}`;
  panel.title.closable = true;
  panel.toolbar.addItem(
    'refresh',
    new ToolbarButton({
      icon: refreshIcon,
      label: 'Refresh',
      tooltip: `Fetch the log of ${name} again`,
      onClick: () => void content.refresh()
    })
  );
  void content.refresh();
  return panel;
}
