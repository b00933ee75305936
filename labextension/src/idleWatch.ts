import { Notification } from '@jupyterlab/apputils';
import { CommandRegistry } from '@lumino/commands';
import { Poll } from '@lumino/polling';
import { ServerConnection } from '@jupyterlab/services';

import { describeError } from './api';
import { clusterKey, fetchUsage } from './clusterApi';
import { CommandIDs } from './commandIds';
import { ClusterListModel, IClusterListState } from './model';
import { clockText, isWarned } from './render';
import { ClusterSidebar } from './sidebar';

const USAGE_REFRESH_MS = 5 * 60 * 1000;

/**
 * A JupyterLab notification when one of the user's clusters is warned that
 * it will be suspended for being idle (while the sidebar is open), with a
 * Keep running action; and the sidebar's GPU-hours, kept fresh.
 */
export function watchIdleWarnings(
  model: ClusterListModel,
  sidebar: ClusterSidebar,
  commands: CommandRegistry,
  serverSettings: ServerConnection.ISettings
): void {
  // Warnings already shown, by cluster and deadline: a new warning after Keep
  // running (a new deadline) is shown again, a re-sent event is not.
  const shown = new Set<string>();
  let first = true;
  const check = (_: ClusterListModel, state: IClusterListState): void => {
    if (!state.loaded) {
      return;
    }
    for (const c of state.clusters) {
      const at = c.idle?.suspend_at ?? null;
      if (!isWarned(c) || at === null) {
        continue;
      }
      const key = `${clusterKey(c)}@${at}`;
      const mine = sidebar.user === null || c.owner === sidebar.user.name;
      if (shown.has(key) || !mine) {
        continue;
      }
      shown.add(key);
      // Warnings that were there when the page loaded show on the card only.
      if (first || !sidebar.isVisible) {
        continue;
      }
      Notification.warning(
        `Ray cluster ${c.name} is idle: it will be suspended at ${clockText(at)}.`,
        {
          autoClose: false,
          actions: [
            {
              label: 'Keep running',
              caption: `Restart the idle clock of ${c.name}`,
              callback: () => {
                void commands.execute(CommandIDs.keepRunning, {
                  name: c.name,
                  namespace: c.namespace
                });
              }
            }
          ]
        }
      );
    }
    first = false;
  };
  model.changed.connect(check);

  const refresh = async (): Promise<void> => {
    if (sidebar.isDisposed) {
      return;
    }
    try {
      sidebar.usage = await fetchUsage(7, model.state.showAll, serverSettings);
    } catch (reason) {
      console.warn(
        `raylab: could not load GPU-hours: ${describeError(reason)}`
      );
    }
  };
  let scope = model.state.showAll;
  model.changed.connect((_, state) => {
    if (state.showAll !== scope) {
      scope = state.showAll;
      void refresh();
    }
  });
  // Now, then every few minutes while the page is visible.
  const poll = new Poll({
    name: 'raylab:usage',
    factory: refresh,
    frequency: { interval: USAGE_REFRESH_MS, backoff: false },
    standby: 'when-hidden'
  });
  sidebar.disposed.connect(() => poll.dispose());
}
