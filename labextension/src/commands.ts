import {
  ICommandPalette,
  InputDialog,
  Notification
} from '@jupyterlab/apputils';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import {
  IRaylabContext,
  connectNotebook,
  copyConnectCode,
  deleteWithConfirm,
  keepClusterRunning,
  newCluster,
  openDashboard,
  reportFailure,
  scaleCluster,
  setSuspended,
  showLogs
} from './actions';
import { CommandIDs } from './commandIds';
import { ICluster } from './clusterApi';
import { ClusterSidebar } from './sidebar';

const CATEGORY = 'Ray';

/**
 * The cluster a command acts on: `args.name`, or (from the palette) one the
 * user picks among those that `eligible` allows.
 */
async function chooseCluster(
  ctx: IRaylabContext,
  args: ReadonlyPartialJSONObject,
  title: string,
  eligible: (c: ICluster) => boolean = () => true
): Promise<string | null> {
  if (typeof args.name === 'string' && args.name) {
    return args.name;
  }
  const names = ctx.model.clusters.filter(eligible).map(c => c.name);
  if (names.length === 0) {
    Notification.info('No Ray cluster to act on: create one first.', {
      autoClose: 4000
    });
    return null;
  }
  const result = await InputDialog.getItem({
    title,
    label: 'Cluster',
    items: names,
    current: 0
  });
  return result.button.accept ? result.value : null;
}

function label(
  args: ReadonlyPartialJSONObject,
  one: string,
  any: string
): string {
  return typeof args.name === 'string' && args.name
    ? `${one} ${args.name}`
    : any;
}

/**
 * Register every raylab command; the sidebar's buttons run the same commands
 * with `{name}` and the palette runs them without (the user picks).
 */
export function registerCommands(
  ctx: IRaylabContext,
  sidebar: ClusterSidebar,
  palette: ICommandPalette | null
): void {
  const { commands } = ctx.app;
  const guarded =
    (
      what: string,
      fn: (name: string) => Promise<void> | void,
      title: string,
      eligible?: (c: ICluster) => boolean
    ) =>
    async (args: ReadonlyPartialJSONObject): Promise<void> => {
      const name = await chooseCluster(ctx, args, title, eligible);
      if (name === null) {
        return;
      }
      try {
        await fn(name);
      } catch (reason) {
        reportFailure(`${what} ${name}`, reason);
      }
    };

  commands.addCommand(CommandIDs.open, {
    label: 'Show Ray Clusters',
    caption: 'Open the Ray clusters panel',
    execute: () => {
      ctx.app.shell.activateById(sidebar.id);
    }
  });

  commands.addCommand(CommandIDs.create, {
    label: 'New Ray Cluster…',
    caption: 'Create a Ray cluster (GPU type, GPUs, workers, image)',
    execute: async () => {
      try {
        const cluster = await newCluster(ctx);
        if (cluster) {
          ctx.app.shell.activateById(sidebar.id);
        }
      } catch (reason) {
        reportFailure('Could not create the cluster', reason);
      }
    }
  });

  commands.addCommand(CommandIDs.connect, {
    label: args =>
      label(args, 'Connect Notebook to', 'Connect Notebook to Ray Cluster…'),
    caption:
      "Load raylab in the active notebook's kernel and connect it to the cluster",
    execute: guarded(
      'Could not connect the notebook to',
      async name => {
        const message = await connectNotebook(ctx, name);
        Notification.success(message, { autoClose: 6000 });
      },
      'Connect the active notebook to'
    )
  });

  commands.addCommand(CommandIDs.copyCode, {
    label: args =>
      label(args, 'Copy Connect Code for', 'Copy Ray Cluster Connect Code…'),
    execute: guarded(
      'Could not copy the connect code of',
      name => copyConnectCode(ctx, name),
      'Copy the connect code of'
    )
  });

  commands.addCommand(CommandIDs.dashboard, {
    label: args => label(args, 'Open Ray Dashboard of', 'Open Ray Dashboard…'),
    execute: guarded(
      'Could not open the dashboard of',
      name => openDashboard(ctx, name),
      'Open the Ray dashboard of',
      c => c.head_ready
    )
  });

  commands.addCommand(CommandIDs.logs, {
    label: args => label(args, 'Show Log of', 'Show Ray Cluster Log…'),
    execute: guarded(
      'Could not show the log of',
      name => showLogs(ctx, name),
      'Show the log of'
    )
  });

  commands.addCommand(CommandIDs.scale, {
    label: args => label(args, 'Scale', 'Scale Ray Cluster…'),
    execute: guarded(
      'Could not scale',
      name => scaleCluster(ctx, name),
      'Scale'
    )
  });

  commands.addCommand(CommandIDs.suspend, {
    label: args => label(args, 'Suspend', 'Suspend Ray Cluster…'),
    execute: guarded(
      'Could not suspend',
      name => setSuspended(ctx, name, true),
      'Suspend',
      c => c.phase !== 'Suspended' && c.phase !== 'Deleting'
    )
  });

  commands.addCommand(CommandIDs.resume, {
    label: args => label(args, 'Resume', 'Resume Ray Cluster…'),
    execute: guarded(
      'Could not resume',
      name => setSuspended(ctx, name, false),
      'Resume',
      c => c.phase === 'Suspended'
    )
  });

  commands.addCommand(CommandIDs.keepRunning, {
    label: args =>
      label(args, 'Keep Running', 'Keep Idle Ray Cluster Running…'),
    caption: "Restart an idle cluster's clock so that it is not suspended",
    execute: guarded(
      'Could not keep running',
      async name => {
        await keepClusterRunning(ctx, name);
        Notification.success(
          `${name} keeps running; its idle clock starts again.`,
          {
            autoClose: 4000
          }
        );
      },
      'Keep running',
      c => c.phase === 'Ready' || c.phase === 'Degraded'
    )
  });

  commands.addCommand(CommandIDs.remove, {
    label: args => label(args, 'Delete', 'Delete Ray Cluster…'),
    execute: guarded(
      'Could not delete',
      async name => {
        await deleteWithConfirm(ctx, name);
      },
      'Delete',
      c => c.phase !== 'Deleting'
    )
  });

  commands.addCommand(CommandIDs.reconnect, {
    label: 'Reconnect the Ray Cluster List',
    caption: 'Reconnect to the live cluster events now',
    execute: () => ctx.model.reconnect()
  });

  commands.addCommand(CommandIDs.toggleAll, {
    label: "Show Every User's Ray Clusters",
    caption: 'Admins: show the clusters of all users, with their owners',
    isVisible: () => sidebar.user?.admin === true,
    isToggled: () => ctx.model.state.showAll,
    execute: () => {
      ctx.model.setShowAll(!ctx.model.state.showAll);
    }
  });

  if (palette) {
    for (const command of [
      CommandIDs.open,
      CommandIDs.create,
      CommandIDs.connect,
      CommandIDs.copyCode,
      CommandIDs.dashboard,
      CommandIDs.logs,
      CommandIDs.scale,
      CommandIDs.suspend,
      CommandIDs.resume,
      CommandIDs.keepRunning,
      CommandIDs.remove,
      CommandIDs.reconnect,
      CommandIDs.toggleAll
    ]) {
      palette.addItem({ command, category: CATEGORY });
    }
  }
}
