import {
  ILayoutRestorer,
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';
import { ICommandPalette, IToolbarWidgetRegistry } from '@jupyterlab/apputils';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ISettingRegistry } from '@jupyterlab/settingregistry';

import { describeError } from './api';
import { CommandIDs } from './commandIds';
import { registerCommands } from './commands';
import { DEFAULT_CONFIG, IRaylabConfig, IRaylabContext } from './context';
import { registerExport } from './export/button';
import { gpuUseOnOpen, hasGpuUseFeature } from './gpuOpen';
import { watchIdleWarnings } from './idleWatch';
import { JobWatcher, hasJobsFeature } from './jobWatch';
import { ClusterListModel } from './model';
import { fetchProfiles } from './profiles';
import { hasServeAppsFeature, serveReader } from './serveOpen';
import { ClusterSidebar } from './sidebar';

const PLUGIN_ID = 'raylab:plugin';

function readConfig(settings: ISettingRegistry.ISettings): IRaylabConfig {
  const c = settings.composite as Partial<IRaylabConfig>;
  return {
    defaultGpuType:
      typeof c.defaultGpuType === 'string'
        ? c.defaultGpuType
        : DEFAULT_CONFIG.defaultGpuType,
    confirmDelete:
      typeof c.confirmDelete === 'boolean'
        ? c.confirmDelete
        : DEFAULT_CONFIG.confirmDelete,
    logTail: typeof c.logTail === 'number' ? c.logTail : DEFAULT_CONFIG.logTail,
    showAllByDefault:
      typeof c.showAllByDefault === 'boolean'
        ? c.showAllByDefault
        : DEFAULT_CONFIG.showAllByDefault
  };
}

/**
 * The raylab frontend: the "Ray clusters" sidebar, live from the server's
 * event stream, the commands behind its buttons, and the notebook toolbar's
 * "Export to pipeline" button (where the server exports).
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: PLUGIN_ID,
  description: 'Ray clusters with GPUs from JupyterLab.',
  autoStart: true,
  optional: [
    ICommandPalette,
    ILayoutRestorer,
    INotebookTracker,
    ISettingRegistry,
    IToolbarWidgetRegistry
  ],
  activate: (
    app: JupyterFrontEnd,
    palette: ICommandPalette | null,
    restorer: ILayoutRestorer | null,
    notebooks: INotebookTracker | null,
    registry: ISettingRegistry | null,
    toolbars: IToolbarWidgetRegistry | null
  ): void => {
    const serverSettings = app.serviceManager.serverSettings;
    const model = new ClusterListModel({ serverSettings });
    // Never let a missing or failing server extension break activation: the
    // sidebar's banner says what is wrong with the event stream.
    const profiles = fetchProfiles(serverSettings).then(
      reply => {
        console.log(`raylab: ${reply.gpu_types.length} GPU profiles`);
        return reply;
      },
      (reason: unknown) => {
        console.warn(
          `raylab: could not load GPU profiles: ${describeError(reason)}`
        );
        return null;
      }
    );
    const ctx: IRaylabContext = {
      app,
      model,
      serverSettings,
      notebooks,
      config: { ...DEFAULT_CONFIG },
      home: profiles.then(reply => reply?.namespace)
    };
    const sidebar = new ClusterSidebar(model, app.commands);
    app.shell.add(sidebar, 'left', { rank: 750, type: 'Ray clusters' });
    restorer?.add(sidebar, sidebar.id);
    registerCommands(ctx, sidebar, palette);
    watchIdleWarnings(model, sidebar, app.commands, serverSettings);
    model.start();
    void profiles.then(reply => {
      if (reply) {
        sidebar.user = reply.user;
      }
      if (reply && hasGpuUseFeature(reply)) {
        sidebar.onCardOpen = gpuUseOnOpen(serverSettings, reply.namespace);
      }
      if (reply && hasServeAppsFeature(reply)) {
        sidebar.serveApps = serveReader(serverSettings, reply.namespace);
      }
      if (reply && hasJobsFeature(reply)) {
        sidebar.jobs = new JobWatcher({
          model,
          serverSettings,
          user: reply.user.name,
          home: reply.namespace,
          openLog: (cluster, job) =>
            void app.commands.execute(CommandIDs.jobLogs, {
              name: cluster.name,
              namespace: cluster.namespace,
              job
            })
        });
      }
    });
    if (notebooks) {
      registerExport({
        app,
        notebooks,
        palette,
        toolbars,
        serverSettings,
        // A notebook exports with its owner's cluster: an admin's "All users"
        // list holds everyone's.
        clusters: () =>
          model.clusters
            .filter(c => sidebar.user === null || c.owner === sidebar.user.name)
            .map(c => c.name),
        profiles
      });
    }

    if (registry) {
      registry
        .load(PLUGIN_ID)
        .then(async settings => {
          const apply = (): void => {
            ctx.config = readConfig(settings);
          };
          apply();
          settings.changed.connect(apply);
          const reply = await profiles;
          if (reply?.user.admin && ctx.config.showAllByDefault) {
            model.setShowAll(true);
          }
        })
        .catch((reason: unknown) => {
          console.warn(
            `raylab: could not load settings: ${describeError(reason)}`
          );
        });
    }
  }
};

export default plugin;
