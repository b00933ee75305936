"""A real Jupyter server with raylab on KubeRay, seen as its clients see it: REST calls as a
hub user, and the Server-Sent Events stream read while it arrives.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import io
import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from tornado.httpclient import AsyncHTTPClient, HTTPRequest

from raylab.magics import RayclusterMagics
from tests.server.conftest import TestUsers, as_user

from .kuberay_support import grant, new_namespace, user_kubeconfig


def server_config(**raylab: Any) -> dict[str, Any]:
    """pytest-jupyter's jp_server_config for raylab on KubeRay, hub users by header. The
    server finds Kubernetes as a real one does: KUBECONFIG (a user's, whose context names
    the namespace)."""
    return {
        "ServerApp": {
            "jpserver_extensions": {"raylab": True},
            "identity_provider_class": TestUsers,
        },
        "Raylab": {"backend": "kuberay", **raylab},
    }


@contextlib.contextmanager
def namespace_of(control_plane: ControlPlane, prefix: str, user: str = "alice") -> Iterator[str]:
    """A fresh namespace where `user` holds the documented Role."""
    admin = control_plane.api_client("admin")
    with new_namespace(admin, prefix) as namespace:
        grant(admin, namespace, user)
        yield namespace


def server_as_alice(
    control_plane: ControlPlane,
    namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    magic_user: str | None = "alice",
) -> dict[str, Any]:
    """jp_server_config for a server that reaches Kubernetes as alice in `namespace`;
    `magic_user` is who `%raycluster` runs as in this process (the server's user comes
    from a header)."""
    kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace, tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    if magic_user:
        monkeypatch.setenv("JUPYTERHUB_USER", magic_user)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return server_config()


def as_hub_user(jp_fetch: Any, user: str) -> Any:
    """jp_fetch as the hub user `user` (the token alone gives a new anonymous user each time)."""

    def fetch(*path: str, **kw: Any) -> Any:
        return jp_fetch(*path, headers=as_user(user), **kw)

    return fetch


async def get(jp_fetch: Any, *path: str) -> Any:
    return json.loads((await jp_fetch("raylab", *path)).body)


async def until(
    probe: Callable[[], Any], what: str, jp_fetch: Any, timeout: float = 60, every: float = 0.25
) -> Any:
    """Await `probe()` until it gives something truthy; on timeout, say what the list was."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(every)
    last = await get(jp_fetch, "clusters")
    raise AssertionError(
        f"timed out after {timeout:.0f} s waiting for {what}; the server says {last}"
    )


def terminal_magic() -> Callable[[str], str]:
    """`%raycluster` as terminal IPython runs it (progress as one line per change), with
    the settings and user of this environment. Made here, in the test's thread; the
    function it returns runs `%raycluster LINE --backend kuberay` and gives what it
    printed, and is meant for a worker thread, so the server goes on serving meanwhile."""
    magics = RayclusterMagics(InteractiveShell.instance())

    def run(line: str) -> str:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                magics.raycluster(f"{line} --backend kuberay")
        except UsageError as exc:
            msg = f"%raycluster {line} failed: {exc}\nit printed:\n{out.getvalue()}"
            raise AssertionError(msg) from None
        return out.getvalue()

    return run


@dataclass
class Received:
    at: float  # time.monotonic() when it arrived
    wall: float  # time.time() then
    data: dict[str, Any]


@dataclass
class EventStream:
    """GET raylab/events, open in the background; every message is kept as it arrives."""

    url: str
    headers: dict[str, str]
    messages: list[Received] = field(default_factory=list)
    _buffer: str = ""
    # A character split between two chunks waits for its second half.
    _decoder: codecs.IncrementalDecoder = field(
        default_factory=lambda: codecs.getincrementaldecoder("utf-8")()
    )
    _arrived: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Future[Any] | None = None

    def open(self) -> EventStream:
        request = HTTPRequest(
            self.url, headers=self.headers, streaming_callback=self._on_chunk, request_timeout=3600
        )
        self._task = asyncio.ensure_future(AsyncHTTPClient().fetch(request, raise_error=False))
        return self

    def close(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def _on_chunk(self, chunk: bytes) -> None:
        self._buffer += self._decoder.decode(chunk)
        while "\n\n" in self._buffer:
            block, self._buffer = self._buffer.split("\n\n", 1)
            for line in block.splitlines():
                if line.startswith("data: "):  # ": keepalive" comments carry nothing
                    self.messages.append(
                        Received(time.monotonic(), time.time(), json.loads(line[6:]))
                    )
                    self._arrived.set()

    async def wait_for(
        self, what: str, match: Callable[[dict[str, Any]], bool], timeout: float, start: int = 0
    ) -> tuple[int, Received]:
        """The first message from index `start` on that `match`es, and its index."""
        deadline = time.monotonic() + timeout
        seen = start
        while True:
            for i in range(seen, len(self.messages)):
                if match(self.messages[i].data):
                    return i, self.messages[i]
            seen = max(seen, len(self.messages))
            left = deadline - time.monotonic()
            if left <= 0:
                kinds = [m.data.get("type") for m in self.messages[start:]][-20:]
                raise AssertionError(f"the event stream carried no {what} (last: {kinds})")
            self._arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), left)

    def clusters(self) -> dict[str, dict[str, Any]]:
        """The clusters as a client folding the snapshot and every change sees them."""
        state: dict[str, dict[str, Any]] = {}
        for message in self.messages:
            data = message.data
            if data["type"] == "SNAPSHOT":
                state = {c["name"]: c for c in data["clusters"]}
            elif data["type"] in ("ADDED", "MODIFIED"):
                state[data["cluster"]["name"]] = data["cluster"]
            elif data["type"] == "DELETED":
                state.pop(data["cluster"]["name"], None)
        return state

    async def settles_to(self, expected: dict[str, dict[str, Any]], timeout: float = 10) -> None:
        """Wait until the folded stream equals `expected` (what the list says)."""
        deadline = time.monotonic() + timeout
        while self.clusters() != expected:
            if time.monotonic() > deadline:
                got, want = self.clusters(), expected
                odd = sorted(n for n in {*got, *want} if got.get(n) != want.get(n))
                raise AssertionError(f"the stream and the list differ on {odd[:10]}")
            await asyncio.sleep(0.1)

    def of(self, kind: str, name: str | None = None) -> list[dict[str, Any]]:
        return [
            m.data
            for m in self.messages
            if m.data["type"] == kind and (name is None or m.data["cluster"]["name"] == name)
        ]


def change(
    kind: str, name: str, *, phase: str | None = None, reason: str = ""
) -> Callable[[dict[str, Any]], bool]:
    """Matches an ADDED/MODIFIED/DELETED message about `name` (in `phase`, with `reason`
    in its reason)."""

    def match(data: dict[str, Any]) -> bool:
        cluster = data.get("cluster") or {}
        return (
            data["type"] == kind
            and cluster.get("name") == name
            and (phase is None or cluster["phase"] == phase)
            and reason in cluster["reason"]
        )

    return match


def event_stream(
    jp_http_port: int, jp_base_url: str, jp_auth_header: dict[str, str], user: str
) -> EventStream:
    url = f"http://localhost:{jp_http_port}{jp_base_url}raylab/events"
    return EventStream(url, {**jp_auth_header, **as_user(user)}).open()


def phases(clusters: list[dict[str, Any]] | dict[str, dict[str, Any]]) -> dict[str, str]:
    items = clusters.values() if isinstance(clusters, dict) else clusters
    return {c["name"]: c["phase"] for c in items}
