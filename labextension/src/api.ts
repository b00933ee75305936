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
  field?: unknown;
  code?: unknown;
}

/**
 * An error from the raylab REST API: the HTTP status plus the server's
 * `{"error", "detail", "field", "code"}` body when there was one: `detail` says
 * what to do, `field` names the request field it concerns (a refused value, or
 * what a quota limits), `code` is a stable name (`invalid`, `quota`, ...).
 */
export class RaylabAPIError extends Error {
  constructor(
    readonly url: string,
    readonly status: number,
    readonly error: string,
    readonly detail?: unknown,
    readonly field: string | null = null,
    readonly code: string | null = null
  ) {
    super(`${error} (HTTP ${status})`);
    this.name = 'RaylabAPIError';
  }

  /**
   * The error a non-2xx response stands for (reads the body).
   */
  static async fromResponse(
    url: string,
    response: Response
  ): Promise<RaylabAPIError> {
    const text = await response.text().catch(() => '');
    const body = text.length > 0 ? parseJSON(text) : undefined;
    if (isErrorBody(body)) {
      return new RaylabAPIError(
        url,
        response.status,
        body.error,
        body.detail,
        typeof body.field === 'string' ? body.field : null,
        typeof body.code === 'string' ? body.code : null
      );
    }
    return new RaylabAPIError(
      url,
      response.status,
      response.statusText || 'Request failed',
      text.length > 0 ? text.slice(0, 200) : undefined
    );
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
 * One line for a user: the server's message (and hint) or the failure's.
 */
export function describeError(reason: unknown): string {
  if (reason instanceof RaylabAPIError) {
    if (reason.status === 404 && reason.error === 'Not Found') {
      return 'the raylab server extension is not enabled on this Jupyter server (HTTP 404)';
    }
    const hint = typeof reason.detail === 'string' ? ` (${reason.detail})` : '';
    return `${reason.error}${hint}`;
  }
  if (reason instanceof ServerConnection.NetworkError) {
    return 'cannot reach the Jupyter server';
  }
  if (reason instanceof Error) {
    return reason.message;
  }
  return String(reason);
}

/**
 * Call the raylab server extension.
 *
 * @param path - the endpoint below `<baseUrl>raylab/`, e.g. `'profiles'`,
 *   with a query string if any
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
  return (await requestAPIWithStatus<T>(path, init, settings)).body;
}

/**
 * `requestAPI`, also returning the HTTP status (e.g. 201 created vs 200 existed).
 */
export async function requestAPIWithStatus<T>(
  path: string,
  init: RequestInit = {},
  settings: ServerConnection.ISettings = ServerConnection.makeSettings()
): Promise<{ status: number; body: T }> {
  const url = URLExt.join(settings.baseUrl, API_NAMESPACE, path);
  // makeRequest adds the token and XSRF headers; it rejects only on a
  // network failure (ServerConnection.NetworkError).
  const response = await ServerConnection.makeRequest(url, init, settings);
  if (!response.ok) {
    throw await RaylabAPIError.fromResponse(url, response);
  }
  const text = await response.text();
  const body = text.length > 0 ? parseJSON(text) : undefined;
  if (text.length > 0 && body === undefined) {
    throw new RaylabAPIError(
      url,
      response.status,
      'Invalid JSON in reply',
      text.slice(0, 200)
    );
  }
  return { status: response.status, body: body as T };
}
