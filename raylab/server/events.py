"""Live events as Server-Sent Events: a snapshot, then each change the caller may see.

SSE rather than a WebSocket: one-way is all the sidebar needs, and it passes through
JupyterHub's proxy as a plain streaming response. The sidebar reads it with a streaming
`fetch` (labextension/src/sse.ts says why not EventSource) and reconnects by itself; each
connection starts with a SNAPSHOT, so nothing missed while away is lost. A comment line
every KEEPALIVE_S keeps idle proxies from closing the stream.
"""

from __future__ import annotations

import asyncio

from jupyter_server.auth.decorator import authorized
from tornado import web
from tornado.iostream import StreamClosedError

from .cache import Message
from .handlers import RaylabHandler

KEEPALIVE_S = 15.0


class EventsHandler(RaylabHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        visible = self.visible(self.wants_everyone())
        self.set_header("Content-Type", "text/event-stream")
        self.set_header("Cache-Control", "no-cache")
        self.set_header("X-Accel-Buffering", "no")  # no buffering in nginx-style proxies
        sub = self.cache.subscribe(visible)
        try:
            await self.cache.wait_synced()
            await self._send({"type": "SNAPSHOT", "text": self.listing("SNAPSHOT", visible)})
            while True:
                try:
                    message = await asyncio.wait_for(sub.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    self.write(": keepalive\n\n")
                    await self.flush()
                    continue
                await self._send(message)
        except StreamClosedError:
            pass  # the browser went away
        finally:
            self.cache.unsubscribe(sub)

    async def _send(self, message: Message) -> None:
        self.write(f"event: {message['type'].lower()}\ndata: {message['text']}\n\n")
        await self.flush()
