/**
 * The SSE parser the sidebar reads the event stream with (no browser needed:
 * it runs in Playwright's Node process).
 */
import { expect, test } from '@playwright/test';

import { SSEParser } from '../../labextension/src/sse';

test('messages split across chunks, CRLF, comments and multi-line data', () => {
  const parser = new SSEParser();
  const text =
    ': keepalive\n\n' +
    'event: snapshot\ndata: {"type": "SNAPSHOT",\r\ndata:  "clusters": []}\r\n\r\n' +
    'event: modified\rdata: {"type": "MODIFIED"}\r\r' +
    'data: no event name\n\n' +
    'event: ignored-without-data\n\n';
  const messages = [];
  // Every split point, one character at a time: what a slow proxy may do.
  for (const ch of text) {
    messages.push(...parser.push(ch));
  }
  expect(messages).toEqual([
    { event: 'snapshot', data: '{"type": "SNAPSHOT",\n "clusters": []}' },
    { event: 'modified', data: '{"type": "MODIFIED"}' },
    { event: 'message', data: 'no event name' }
  ]);
  expect(JSON.parse(messages[0].data)).toEqual({
    type: 'SNAPSHOT',
    clusters: []
  });
});

test('a partial message waits for its blank line', () => {
  const parser = new SSEParser();
  expect(parser.push('event: added\ndata: {"a": 1}\n')).toEqual([]);
  expect(parser.push('\n')).toEqual([{ event: 'added', data: '{"a": 1}' }]);
});
