import { ServerConnection } from '@jupyterlab/services';

import { RaylabAPIError, requestAPI } from '../api';
import { IProfilesReply } from '../profiles';

/**
 * The feature name the server lists in `GET raylab/profiles` when it serves
 * `POST raylab/export`.
 */
export const EXPORT_FEATURE = 'export';

/**
 * The body of `POST <baseUrl>raylab/export`. Paths are API paths, relative to
 * the server's root, as the contents API speaks them.
 */
export interface IExportRequest {
  path: string;
  name?: string;
  cluster?: string;
  schedule?: string;
  cells?: 'tagged' | 'all';
  force?: boolean;
  out?: string;
}

/**
 * The reply (201) of `POST <baseUrl>raylab/export`.
 */
export interface IExportReply {
  /** The pipeline's name (also its Python package). */
  name: string;
  /** The generated project folder, as an API path. */
  out_dir: string;
  /** The generated files, relative to `out_dir`. */
  files: string[];
  /** The text of EXPORT.md. */
  report: string;
  /** One line each: what the user should check or change. */
  warnings: string[];
}

/** The report every export writes at the top of its folder. */
export const REPORT_FILE = 'EXPORT.md';

/**
 * Whether the server said it serves the export API. A reply without the
 * list (an older server) or no reply at all (no server extension) means no.
 */
export function hasExportFeature(reply: IProfilesReply | null): boolean {
  return (
    reply !== null &&
    Array.isArray(reply.features) &&
    reply.features.includes(EXPORT_FEATURE)
  );
}

/**
 * Whether a refusal is "that folder holds an earlier export": the one the
 * user may resolve by replacing it. (409 is also the answer for a folder
 * that is not an export; replacing is never offered for that one.)
 */
export function isEarlierExport(reason: unknown): boolean {
  return (
    reason instanceof RaylabAPIError &&
    reason.status === 409 &&
    reason.error.endsWith('already exists; nothing was written')
  );
}

/**
 * Export a notebook as a Dagster project folder.
 *
 * @throws {RaylabAPIError} when the server refuses (422 names the field,
 *   409 the folder exists, 404 no such notebook or cluster)
 */
export async function exportNotebook(
  request: IExportRequest,
  settings?: ServerConnection.ISettings
): Promise<IExportReply> {
  const reply = await requestAPI<IExportReply | undefined>(
    'export',
    { method: 'POST', body: JSON.stringify(request) },
    settings
  );
  if (!reply || typeof reply.out_dir !== 'string') {
    throw new Error('unexpected reply from raylab/export: no out_dir');
  }
  return reply;
}
