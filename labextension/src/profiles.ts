import { ServerConnection } from '@jupyterlab/services';

import { requestAPI } from './api';
import { IRequestField } from './requestFields';

/**
 * One GPU type the admin configured (`raylab/profiles.py`, `GpuProfile.to_json`).
 */
export interface IGpuProfile {
  name: string;
  description: string;
  resource_key: string;
  node_selector: Record<string, string>;
  tolerations: Record<string, string>[];
  head_node_selector: Record<string, string>;
  head_tolerations: Record<string, string>[];
  /** 0 for a CPU-only profile. */
  max_gpus_per_worker: number;
  default_cpus: string;
  default_memory: string;
}

/**
 * The defaults a request gets for the fields it leaves out.
 */
export interface IProfileDefaults {
  gpu_type: string;
  gpus: number;
  workers: number;
  image: string | null;
  timeout: number;
}

/**
 * The per-user limits the admin set, and how much of them the caller uses.
 */
export interface IQuota {
  max_gpus_per_user: number;
  max_clusters_per_user: number;
  max_workers_per_cluster: number;
  gpus_used: number;
  clusters_used: number;
  gpus_left: number;
  clusters_left: number;
}

/**
 * Who the server says the caller is.
 */
export interface IUser {
  name: string;
  admin: boolean;
}

/**
 * The reply of `GET <baseUrl>raylab/profiles`.
 */
export interface IProfilesReply {
  gpu_types: IGpuProfile[];
  defaults: IProfileDefaults;
  backend: string;
  /** Whether the backend autoscales between a minimum and a maximum of workers. */
  autoscales: boolean;
  quota: IQuota;
  user: IUser;
  /** Optional endpoints the server has, e.g. `'export'` (older servers: none). */
  features?: string[];
  /**
   * Where a name alone (`clusters/NAME`) points: the backend's namespace,
   * null on the local backend; absent from servers older than the overview.
   */
  namespace?: string | null;
  /** Kueue: the LocalQueue each GPU type's clusters wait in ('' none); absent: none. */
  queues?: Record<string, string>;
  /** Kueue priority classes a user may ask for (the first is the default). */
  priority_classes?: string[];
  /**
   * The request's fields as the server declares them (the New-cluster
   * dialog's inputs); absent from servers older than the declarations.
   */
  fields?: IRequestField[];
}

/**
 * Fetch the GPU profiles, defaults and quota the server offers.
 */
export async function fetchProfiles(
  settings?: ServerConnection.ISettings
): Promise<IProfilesReply> {
  const reply = await requestAPI<IProfilesReply | undefined>(
    'profiles',
    { method: 'GET' },
    settings
  );
  if (!reply || !Array.isArray(reply.gpu_types)) {
    throw new Error('unexpected reply from raylab/profiles: no gpu_types');
  }
  return reply;
}
