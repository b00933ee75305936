import {
  JupyterFrontEnd,
  JupyterFrontEndPlugin
} from '@jupyterlab/application';

import { RaylabAPIError } from './api';
import { fetchProfiles } from './profiles';

function describeFailure(reason: unknown): string {
  if (reason instanceof RaylabAPIError) {
    return `${reason.message} from ${reason.url}`;
  }
  if (reason instanceof Error) {
    return reason.message;
  }
  return String(reason);
}

/**
 * The raylab frontend plugin. For now it checks that the raylab server
 * extension answers; the sidebar builds on the same REST client.
 */
const plugin: JupyterFrontEndPlugin<void> = {
  id: 'raylab:plugin',
  description: 'Ray clusters with GPUs from JupyterLab.',
  autoStart: true,
  activate: (app: JupyterFrontEnd): void => {
    // Never let a missing or failing server extension break activation:
    // the request runs detached and every failure ends in a warning.
    fetchProfiles(app.serviceManager.serverSettings)
      .then(reply => {
        console.log(`raylab: ${reply.gpu_types.length} GPU profiles`);
      })
      .catch((reason: unknown) => {
        console.warn(
          `raylab: could not load GPU profiles (is the raylab server extension enabled?): ${describeFailure(reason)}`
        );
      });
  }
};

export default plugin;
