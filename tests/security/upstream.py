"""A stand-in for a head's dashboard that records every request reaching it, so a test
can see what the proxy forwards (Ray's own dashboard logs request lines, never bodies
or headers)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass(frozen=True)
class Seen:
    method: str
    path: str  # with its query
    headers: dict[str, str]  # lower-case names
    body: bytes


class _Handler(BaseHTTPRequestHandler):
    server: _Recorder

    def log_message(self, format: str, *args: object) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.server.seen.append(Seen(self.command, self.path, headers, body))
        if headers.get("upgrade", "").lower() == "websocket":
            self.send_response(400)  # seen is all a test needs
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        stream = headers.get("accept") == "text/event-stream"
        text = b"data: hello\n\n" if stream else b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream" if stream else "application/json")
        # What a hostile head could send: its own, looser policy.
        self.send_header("Content-Security-Policy", "default-src *")
        self.send_header("Content-Length", str(len(text)))
        self.end_headers()
        self.wfile.write(text)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815 (http.server)


class _Recorder(ThreadingHTTPServer):
    seen: list[Seen]


@contextmanager
def recording_upstream() -> Iterator[tuple[str, list[Seen]]]:
    """(its address, what it has seen so far)."""
    server = _Recorder(("127.0.0.1", 0), _Handler)
    server.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen
    finally:
        server.shutdown()
        server.server_close()
