"""A local TCP port relayed to a pod port through the API server (kubectl port-forward).

From a laptop, `<cluster>-head-svc.<namespace>.svc` does not resolve; Ray Client then
goes to 127.0.0.1:<local port>, and each TCP connection accepted there is carried over
its own port-forward websocket to the head pod. The relay does not know Kubernetes: it
takes a function that opens the remote end, so it can be tested with any socket.
"""

from __future__ import annotations

import contextlib
import logging
import select
import socket
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger("raylab.kuberay")

_CHUNK = 64 * 1024

# Something with fileno/recv/sendall/close: a socket, or the client's port-forward socket.
Remote = Any


class Relay:
    """Listen on host:0; pipe each accepted connection to a new `open_remote()`."""

    def __init__(self, open_remote: Callable[[], Remote], host: str = "127.0.0.1") -> None:
        self._open_remote = open_remote
        self._listener = socket.create_server((host, 0))
        self.host: str = host
        self.port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="raylab-relay", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        # shutdown() wakes the accept() blocked in the relay thread; close() alone may not.
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._thread.join(timeout=2)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(
                target=self._serve, args=(conn,), name="raylab-relay-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            remote = self._open_remote()
        except Exception as exc:
            log.warning("raylab: port-forward failed: %s", exc)
            conn.close()
            return
        try:
            pump(conn, remote, self._closed)
        finally:
            for end in (conn, remote):
                with contextlib.suppress(OSError):
                    end.close()


def pump(a: Remote, b: Remote, stop: threading.Event) -> None:
    """Copy bytes both ways until both sides have closed (or `stop` is set).

    One side's end of data is passed on as a half-close, so replies still in flight
    from the other side are delivered.
    """
    routes = {a.fileno(): (a, b), b.fileno(): (b, a)}
    while routes and not stop.is_set():
        readable, _, _ = select.select(list(routes), [], [], 0.5)
        for fd in readable:
            source, target = routes[fd]
            try:
                data = source.recv(_CHUNK)
            except OSError:
                return
            if not data:
                del routes[fd]
                with contextlib.suppress(OSError):
                    target.shutdown(socket.SHUT_WR)
                continue
            try:
                target.sendall(data)
            except OSError:
                return
