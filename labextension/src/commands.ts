import {
  ICommandPalette,
  InputDialog,
  Notification
} from '@jupyterlab/apputils';
import { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import {
  clusterOrThrow,
  connectNotebook,
  copyConnectCode,
  deleteWithConfirm,
  displayName,
  keepClusterRunning,
  newCluster,
  openDashboard,
  reportFailure,
  setSuspended,
  showJobLogs,
  showLogs
} from './actions';
import { CommandIDs } from './commandIds';
import {
  ICluster,
  IClusterRoute,
  clusterRoute,
  dashboardPath
} from './clusterApi';
import { IRaylabContext } from './context';
import { scaleCluster } from './scaleDialog';
import { ClusterSidebar } from './sidebar';

const CATEGORY = 'Ray';

/** Whether a command applies to a cluster (reached by `route`). */
type Eligible = (cluster: ICluster, route: IClusterRoute) => boolean;

/**
 * The cluster a command acts on: `args.name` (in `args.namespace`, when
 * given; else the home namespace's), or (from the palette) one the user
 * picks among those that `eligible` allows. Clusters outside the home
 * namespace (an admin's overview) are offered as "name (namespace)".
 */
async function chooseCluster(
  ctx: IRaylabContext,
  args: ReadonlyPartialJSONObject,
  title: string,
  eligible: Eligible = () => true
): Promise<ICluster | null> {
  if (typeof args.name === 'string' && args.name) {
    const namespace =
      typeof args.namespace === 'string' || args.namespace === null
        ? args.namespace
        : undefined;
    return clusterOrThrow(ctx, args.name, namespace);
  }
  const home = await ctx.home;
  const choices: [string, ICluster][] = [];
  for (const c of ctx.model.clusters) {
    const route = clusterRoute(c, home);
    if (eligible(c, route)) {
      choices.push([displayName(c, route), c]);
    }
  }
  if (choices.length === 0) {
    Notification.info('No Ray cluster to act on: create one first.', {
      autoClose: 4000
    });
    return null;
  }
  const result = await InputDialog.getItem({
    title,
    label: 'Cluster',
    items: choices.map(([shown]) => shown),
    current: 0
  });
  if (!result.button.accept) {
    return null;
  }
  return choices.find(([shown]) => shown === result.value)?.[1] ?? null;
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
 * with `{name, namespace}` and the palette runs them without (the user picks).
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
      fn: (cluster: ICluster) => Promise<void> | void,
      title: string,
      eligible?: Eligible
    ) =>
    async (args: ReadonlyPartialJSONObject): Promise<void> => {
      let name = typeof args.name === 'string' ? args.name : '';
      try {
        const cluster = await chooseCluster(ctx, args, title, eligible);
        if (cluster === null) {
          return;
        }
        name = cluster.name;
        await fn(cluster);
      } catch (reason) {
        reportFailure(`${what} ${name}`, reason);
      }
    };
  // A notebook's kernel connects to clusters of its own namespace only.
  const ownNamespace: Eligible = (_, route) => route.namespace === null;

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
      async cluster => {
        const message = await connectNotebook(ctx, cluster);
        Notification.success(message, { autoClose: 6000 });
      },
      'Connect the active notebook to',
      ownNamespace
    )
  });

  commands.addCommand(CommandIDs.copyCode, {
    label: args =>
      label(args, 'Copy Connect Code for', 'Copy Ray Cluster Connect Code…'),
    execute: guarded(
      'Could not copy the connect code of',
      cluster => copyConnectCode(cluster),
      'Copy the connect code of',
      ownNamespace
    )
  });

  commands.addCommand(CommandIDs.dashboard, {
    label: args => label(args, 'Open Ray Dashboard of', 'Open Ray Dashboard…'),
    execute: guarded(
      'Could not open the dashboard of',
      cluster => openDashboard(ctx, cluster),
      'Open the Ray dashboard of',
      c => c.head_ready && dashboardPath(c) !== null
    )
  });

  commands.addCommand(CommandIDs.logs, {
    label: args => label(args, 'Show Log of', 'Show Ray Cluster Log…'),
    execute: guarded(
      'Could not show the log of',
      cluster => showLogs(ctx, cluster),
      'Show the log of'
    )
  });

  // From a card's Jobs section or a job's notification: `{name, namespace, job}`.
  commands.addCommand(CommandIDs.jobLogs, {
    label: args =>
      typeof args.job === 'string'
        ? `Show Log of Ray Job ${args.job}`
        : 'Show Log of Ray Job',
    execute: async args => {
      const job = typeof args.job === 'string' ? args.job : '';
      if (!job) {
        return;
      }
      await guarded(
        `Could not show the log of job ${job} on`,
        cluster => showJobLogs(ctx, cluster, job),
        `Show the log of job ${job} on`
      )(args);
    }
  });

  commands.addCommand(CommandIDs.scale, {
    label: args => label(args, 'Scale', 'Scale Ray Cluster…'),
    execute: guarded(
      'Could not scale',
      cluster => scaleCluster(ctx, cluster),
      'Scale'
    )
  });

  commands.addCommand(CommandIDs.suspend, {
    label: args => label(args, 'Suspend', 'Suspend Ray Cluster…'),
    execute: guarded(
      'Could not suspend',
      cluster => setSuspended(ctx, cluster, true),
      'Suspend',
      c => c.phase !== 'Suspended' && c.phase !== 'Deleting'
    )
  });

  commands.addCommand(CommandIDs.resume, {
    label: args => label(args, 'Resume', 'Resume Ray Cluster…'),
    execute: guarded(
      'Could not resume',
      cluster => setSuspended(ctx, cluster, false),
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
      async cluster => {
        await keepClusterRunning(ctx, cluster);
        Notification.success(
          `${cluster.name} keeps running; its idle clock starts again.`,
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
      async cluster => {
        await deleteWithConfirm(ctx, cluster);
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
