/**
 * A Server-Sent Events reader over a streaming `fetch`.
 *
 * Why not `EventSource`: it cannot send headers, so it only works where
 * Jupyter authenticates by cookie. A server started with a token only (or a
 * JupyterHub API token) would refuse it, and putting the token in the URL
 * leaks it into proxy and server logs. Reading the stream through
 * `ServerConnection.makeRequest` sends exactly the credentials every other
 * JupyterLab request sends (token header, XSRF, cookies). We also control
 * reconnection ourselves: backoff, and a banner saying why.
 */

export interface ISSEMessage {
  /** The `event:` field; `message` when the server sent none. */
  event: string;
  /** The `data:` lines joined with newlines. */
  data: string;
}

/**
 * Incremental parser of the `text/event-stream` format (WHATWG HTML, 9.2.6).
 * Feed it decoded text in arbitrary chunks; it returns complete messages.
 */
export class SSEParser {
  /**
   * Parse the next chunk of text.
   *
   * @returns the messages completed by this chunk, in order
   */
  push(chunk: string): ISSEMessage[] {
    this._buffer += chunk;
    const messages: ISSEMessage[] = [];
    // Lines end in \n, \r\n or \r; keep a trailing partial line (and a lone
    // \r that may be the first half of \r\n) for the next chunk.
    let start = 0;
    for (let i = 0; i < this._buffer.length; i++) {
      const c = this._buffer.charCodeAt(i);
      if (c !== 10 && c !== 13) {
        continue;
      }
      if (c === 13) {
        if (i + 1 >= this._buffer.length) {
          break;
        }
        if (this._buffer.charCodeAt(i + 1) === 10) {
          this._line(this._buffer.slice(start, i), messages);
          i++;
          start = i + 1;
          continue;
        }
      }
      this._line(this._buffer.slice(start, i), messages);
      start = i + 1;
    }
    this._buffer = this._buffer.slice(start);
    return messages;
  }

  private _line(line: string, out: ISSEMessage[]): void {
    if (line === '') {
      if (this._data.length > 0) {
        out.push({
          event: this._event || 'message',
          data: this._data.join('\n')
        });
      }
      this._event = '';
      this._data = [];
      return;
    }
    if (line.startsWith(':')) {
      return; // a comment: the server's keepalive
    }
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) {
      value = value.slice(1);
    }
    if (field === 'event') {
      this._event = value;
    } else if (field === 'data') {
      this._data.push(value);
    }
    // `id` and `retry` are not used by the raylab server.
  }

  private _buffer = '';
  private _event = '';
  private _data: string[] = [];
}

/**
 * Read a response body as SSE until it ends or `signal` aborts.
 *
 * @param onChunk - called for every chunk received, keepalives included
 *   (the caller's watchdog)
 * @param onMessages - called with the messages each chunk completed
 */
export async function readEventStream(
  body: ReadableStream<Uint8Array>,
  onMessages: (messages: ISSEMessage[]) => void,
  onChunk: () => void
): Promise<void> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) {
        return;
      }
      onChunk();
      const messages = parser.push(decoder.decode(value, { stream: true }));
      if (messages.length > 0) {
        onMessages(messages);
      }
    }
  } finally {
    reader.releaseLock();
  }
}
