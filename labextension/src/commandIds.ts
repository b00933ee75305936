import type { ICluster } from './clusterApi';

/** The command ids of raylab (command palette, sidebar buttons). */
export namespace CommandIDs {
  export const open = 'raylab:open';
  export const create = 'raylab:new-cluster';
  export const connect = 'raylab:connect-notebook';
  export const copyCode = 'raylab:copy-connect-code';
  export const dashboard = 'raylab:open-dashboard';
  export const logs = 'raylab:show-logs';
  export const jobLogs = 'raylab:show-job-log';
  export const scale = 'raylab:scale';
  export const suspend = 'raylab:suspend';
  export const resume = 'raylab:resume';
  export const keepRunning = 'raylab:keep-running';
  export const remove = 'raylab:delete';
  export const reconnect = 'raylab:reconnect';
  export const toggleAll = 'raylab:toggle-all-users';
  export const exportNotebook = 'raylab:export-notebook';
  export const exportWithOptions = 'raylab:export-notebook-with-options';
}

/**
 * Run a command, on `cluster` when given (as `{name, namespace}`, with
 * `args` added: a job's `{job}`).
 */
export type Run = (
  command: string,
  cluster?: ICluster,
  args?: { job: string }
) => Promise<void>;
