import { JupyterFrontEnd } from '@jupyterlab/application';
import {
  CommandToolbarButton,
  Dialog,
  ICommandPalette,
  IToolbarWidgetRegistry,
  Notification,
  showDialog
} from '@jupyterlab/apputils';
import { PathExt } from '@jupyterlab/coreutils';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';
import React from 'react';

import { RaylabAPIError, describeError } from '../api';
import { CommandIDs } from '../commandIds';
import { pipelineIcon } from '../icons';
import { IProfilesReply } from '../profiles';
import {
  IExportReply,
  IExportRequest,
  REPORT_FILE,
  exportNotebook,
  hasExportFeature,
  isEarlierExport
} from './api';
import { askExportOptions } from './options';

/** The notebook toolbar item's name (`jupyter.lab.toolbars` in schema/plugin.json). */
export const TOOLBAR_ITEM = 'raylab-export';
const CAPTION = 'Export to pipeline (a Dagster project from this notebook)';

export interface IExportOptions {
  app: JupyterFrontEnd;
  notebooks: INotebookTracker;
  palette: ICommandPalette | null;
  toolbars: IToolbarWidgetRegistry | null;
  serverSettings: ServerConnection.ISettings;
  /** The names of the user's clusters, for the options dialog. */
  clusters: () => string[];
  /** The server's profiles reply (null: none), which says whether it exports. */
  profiles: Promise<IProfilesReply | null>;
}

/** The optional request fields a command caller may pass as arguments. */
const PASSED = ['name', 'cluster', 'schedule', 'cells', 'out'] as const;

function requestFor(
  path: string,
  args: ReadonlyPartialJSONObject,
  force: boolean
): IExportRequest {
  const request: IExportRequest = { path, force };
  for (const key of PASSED) {
    const value = args[key];
    if (typeof value === 'string' && value) {
      (request as unknown as Record<string, string>)[key] = value;
    }
  }
  return request;
}

/** The server's words for a failure: its error, and its detail if that adds something. */
function ErrorBody(props: { reason: unknown }): React.ReactElement {
  const { reason } = props;
  const message =
    reason instanceof RaylabAPIError ? reason.error : describeError(reason);
  const detail =
    reason instanceof RaylabAPIError && typeof reason.detail === 'string'
      ? reason.detail
      : null;
  return (
    <div className="jp-raylab-export-error">
      <p role="alert">{message}</p>
      {detail && <p className="jp-raylab-export-detail">{detail}</p>}
    </div>
  );
}

function WarningsBody(props: { reply: IExportReply }): React.ReactElement {
  return (
    <div className="jp-raylab-export-warnings">
      <p>
        The pipeline was written to <code>{props.reply.out_dir}</code>; check
        these before you deploy it ({REPORT_FILE} says more):
      </p>
      <ul>
        {props.reply.warnings.map(w => (
          <li key={w}>{w}</li>
        ))}
      </ul>
    </div>
  );
}

async function confirmReplace(reason: unknown): Promise<boolean> {
  // The server names the folder by its path on the server's disk; its name
  // is enough here (the file browser shows it beside the notebook).
  const message =
    reason instanceof RaylabAPIError ? reason.error : describeError(reason);
  const folder = PathExt.basename(message.replace(/ already exists;.*$/, ''));
  const result = await showDialog({
    title: 'Replace the earlier export?',
    body: (
      <div className="jp-raylab-export-replace">
        <p>
          The folder <code>{folder}</code> already exists: it holds an earlier
          export, and nothing was written.
        </p>
        <p>
          Replacing it writes a new export in its place; changes you made in
          that folder are lost.
        </p>
      </div>
    ),
    buttons: [
      Dialog.cancelButton(),
      Dialog.warnButton({
        label: 'Replace',
        ariaLabel: 'Replace the earlier export'
      })
    ],
    defaultButton: 0
  });
  return result.button.accept;
}

/**
 * Open what an export made: the folder in the file browser, then its report
 * (rendered) in the main area.
 */
async function openResult(
  app: JupyterFrontEnd,
  reply: IExportReply
): Promise<void> {
  if (reply.out_dir.startsWith('/')) {
    return; // outside the server's root: the contents API cannot show it
  }
  await app.commands.execute('filebrowser:go-to-path', {
    path: reply.out_dir
  });
  const report = PathExt.join(reply.out_dir, REPORT_FILE);
  let widget: unknown;
  try {
    widget = await app.commands.execute('docmanager:open', {
      path: report,
      factory: 'Markdown Preview'
    });
  } catch {
    widget = await app.commands.execute('docmanager:open', { path: report });
  }
  // Already open from an earlier export: show the new report, not the old.
  const context = (widget as { context?: { revert?: () => Promise<void> } })
    .context;
  await context?.revert?.();
}

function reportSuccess(
  notebook: string,
  reply: IExportReply,
  id: string
): void {
  // The folder's name only: a notification keeps 140 characters, and the
  // file browser shows where the folder is.
  const where = `Exported ${notebook} to ${PathExt.basename(reply.out_dir)}`;
  const count = reply.warnings.length;
  if (count === 0) {
    Notification.update({
      id,
      message: `${where}.`,
      type: 'success',
      autoClose: 6000
    });
    return;
  }
  Notification.update({
    id,
    message: `${where}, with ${count} warning${count === 1 ? '' : 's'}.`,
    type: 'warning',
    autoClose: false,
    actions: [
      {
        label: 'Show warnings',
        caption: 'What to check in the exported pipeline',
        callback: () => {
          void showDialog({
            title: `Export of ${notebook}: ${count} warning${count === 1 ? '' : 's'}`,
            body: <WarningsBody reply={reply} />,
            buttons: [Dialog.okButton({ label: 'Close' })]
          });
        }
      }
    ]
  });
}

/**
 * The notebook toolbar's "Export to pipeline" button and the palette's
 * "Export Notebook to Pipeline" command. Both stay hidden unless the server
 * says (in its profiles reply) that it serves the export API.
 */
export function registerExport(options: IExportOptions): void {
  const { app, notebooks, palette, toolbars, serverSettings } = options;
  const { commands } = app;
  const contents = app.serviceManager.contents;
  let available = false;
  const running = new Set<string>(); // ids of the notebook panels exporting now
  const changed = (): void => {
    commands.notifyCommandChanged(CommandIDs.exportNotebook);
    commands.notifyCommandChanged(CommandIDs.exportWithOptions);
  };

  // The toolbar's button names its own notebook; the palette acts on the active one.
  const target = (args: ReadonlyPartialJSONObject): NotebookPanel | null => {
    const id = args.panel;
    if (typeof id === 'string') {
      return notebooks.find(p => p.id === id) ?? null;
    }
    return notebooks.currentWidget;
  };

  const run = async (
    panel: NotebookPanel,
    args: ReadonlyPartialJSONObject
  ): Promise<void> => {
    const notebook = PathExt.basename(panel.context.path);
    running.add(panel.id);
    changed();
    let progress = Notification.emit(
      `Exporting ${notebook} to a Dagster pipeline…`,
      'in-progress',
      { autoClose: false }
    );
    try {
      // The server reads the notebook from disk: what is on screen must be there.
      if (panel.context.model.dirty && !panel.context.model.readOnly) {
        await panel.context.save();
      }
      const path = contents.localPath(panel.context.path);
      let reply: IExportReply;
      try {
        reply = await exportNotebook(
          requestFor(path, args, args.force === true),
          serverSettings
        );
      } catch (reason) {
        if (!isEarlierExport(reason)) {
          throw reason;
        }
        Notification.dismiss(progress);
        if (!(await confirmReplace(reason))) {
          return;
        }
        progress = Notification.emit(
          `Exporting ${notebook} again, replacing the earlier export…`,
          'in-progress',
          { autoClose: false }
        );
        reply = await exportNotebook(
          requestFor(path, args, true),
          serverSettings
        );
      }
      reportSuccess(notebook, reply, progress);
      await openResult(app, reply);
    } catch (reason) {
      Notification.dismiss(progress);
      console.warn(`raylab: export of ${notebook} failed`, reason);
      await showDialog({
        title: `Could not export ${notebook}`,
        body: <ErrorBody reason={reason} />,
        buttons: [Dialog.okButton({ label: 'Close' })]
      });
    } finally {
      running.delete(panel.id);
      changed();
    }
  };

  // What both commands share: shown only where the server exports, enabled
  // for a notebook that is not exporting already.
  const common = {
    icon: pipelineIcon,
    isVisible: () => available,
    isEnabled: (args: ReadonlyPartialJSONObject) => {
      const panel = target(args);
      return panel !== null && !running.has(panel.id);
    }
  };
  const withNotebook =
    (
      fn: (
        panel: NotebookPanel,
        args: ReadonlyPartialJSONObject
      ) => Promise<void>
    ) =>
    async (args: ReadonlyPartialJSONObject): Promise<void> => {
      const panel = target(args);
      if (!panel) {
        Notification.info('Open a notebook first: Export exports it.', {
          autoClose: 4000
        });
        return;
      }
      await fn(panel, args);
    };

  commands.addCommand(CommandIDs.exportNotebook, {
    ...common,
    label: 'Export Notebook to Pipeline',
    caption: CAPTION,
    execute: withNotebook(run)
  });
  commands.addCommand(CommandIDs.exportWithOptions, {
    ...common,
    label: 'Export Notebook to Pipeline with Options…',
    caption:
      'Export the active notebook, choosing the pipeline name, cluster, schedule and cells',
    execute: withNotebook(async panel => {
      const notebook = PathExt.basename(panel.context.path);
      const choices = await askExportOptions(notebook, options.clusters());
      if (choices) {
        await run(panel, { ...choices });
      }
    })
  });
  notebooks.currentChanged.connect(changed);

  toolbars?.addFactory<NotebookPanel>(
    'Notebook',
    TOOLBAR_ITEM,
    panel =>
      new CommandToolbarButton({
        commands,
        id: CommandIDs.exportNotebook,
        args: { panel: panel.id },
        label: '',
        caption: CAPTION
      })
  );
  for (const command of [
    CommandIDs.exportNotebook,
    CommandIDs.exportWithOptions
  ]) {
    palette?.addItem({ command, category: 'Ray' });
  }

  void options.profiles.then(reply => {
    available = hasExportFeature(reply);
    // Said once, for whoever wonders where the button is (and for the tests).
    console.log(
      available
        ? 'raylab: pipeline export available'
        : 'raylab: this server has no pipeline export; no Export button'
    );
    changed();
  });
}
