import { JupyterFrontEnd } from '@jupyterlab/application';
import { INotebookTracker } from '@jupyterlab/notebook';
import { ServerConnection } from '@jupyterlab/services';

import { ClusterListModel } from './model';

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
  /**
   * The server's home namespace (the profiles reply's `namespace`: where a
   * name alone points; null on the local backend), undefined when the server
   * does not say. Clusters elsewhere are reached by their namespaced path.
   */
  home: Promise<string | null | undefined>;
}

/** An error whose message is meant for the user as it is. */
export class UserError extends Error {}
