import { URLExt } from '@jupyterlab/coreutils';
import { ServerConnection } from '@jupyterlab/services';

/**
 * The URL namespace of the raylab server extension, below the server's base URL.
 */
export const API_NAMESPACE = 'raylab';

/**
 * The JSON body the raylab server extension sends with a 4xx/5xx reply.
 */
export interface IErrorBody {
  error: string;
  detail?: unknown;
}

/**
 * An error from the raylab REST API: the HTTP status plus the server's
 * `{"error": ..., "detail": ...}` body when there was one.
 */
export class RaylabAPIError extends Error {
  constructor(
    readonly url: string,
    readonly status: number,
    readonly error: string,
    readonly detail?: unknown
  ) {
    super(`${error} (HTTP ${status})`);
    this.name = 'RaylabAPIError';
  }
}

function isErrorBody(value: unknown): value is IErrorBody {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { error?: unknown }).error === 'string'
  );
}

function parseJSON(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

/**
 * Call the raylab server extension.
 *
 * @param path - the endpoint below `<baseUrl>raylab/`, e.g. `'profiles'`
 * @param init - the request options (method, body, ...)
 * @param settings - the server connection settings; defaults to the page's
 * @returns the decoded JSON reply (`undefined` for an empty body)
 * @throws {RaylabAPIError} on a non-2xx reply
 * @throws {ServerConnection.NetworkError} when the server cannot be reached
 */
export async function requestAPI<T>(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<T> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, path);
  // makeRequest adds the token and XSRF headers; it rejects only on a
  // network failure (ServerConnection.NetworkError).
  const response = await ServerConnection.makeRequest(url, init, settings);
  const text = await response.text();
  const body = text.length > 0 ? parseJSON(text) : undefined;

  if (!response.ok) {
    if (isErrorBody(body)) {
      throw new RaylabAPIError(url, response.status, body.error, body.detail);
    }
    throw new RaylabAPIError(
      url,
      response.status,
      response.statusText || 'Request failed',
      text.length > 0 ? text : undefined
    );
  }
  if (text.length > 0 && body === undefined) {
    throw new RaylabAPIError(
      url,
      response.status,
      'Invalid JSON in reply',
      text.slice(0, 200)
    );
  }
  return body as T;
}
