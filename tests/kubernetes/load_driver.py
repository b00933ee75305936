"""Many clients listing and streaming while clusters are created and deleted.

The load run behind bench/bench_load.py (60 s, figures) and tests/kubernetes/test_load.py
(20 s, assertions); both start the server (server_process.py) and call `drive`.

Each client does what an open sidebar plus a busy script would: it keeps the event stream
(`GET raylab/events`) open and folds every message into its own view of the clusters, and
lists (`GET raylab/clusters`) in a loop, pausing 0.5-1.5 s between lists (random, so the
clients do not march in step). Meanwhile a writer creates a small cluster every
`write_every_s` through the REST API and deletes the oldest once more than `KEEP` of its
clusters exist; at the end of the window it deletes the rest. Then, once the server's list
holds only the seeded clusters again, every client's view must equal that list.

The event streams are read with a plain HTTP/1.1 client on asyncio streams (chunked, as a
browser's EventSource gets them) so each one can be closed for sure; lists and writes use
tornado's client. Latencies are taken at the client, so they include the client's own
scheduling on the same cores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import psutil
from tornado.httpclient import AsyncHTTPClient, HTTPResponse

from .server_process import Server

KEEP = 3  # the writer's clusters alive at once
CHURN_PREFIX = "churn-"
SMALL = {"workers": 1, "cpus": "1", "memory": "1Gi"}  # a head and one worker pod
SETTLE_S = 120.0  # after the window: deletions finish, views catch up
# The bound on the server's RSS growth, from before the clients came to after they left.
# Before, the server has served a create, a delete and 50 lists, so the watch, the
# Kubernetes client and every code path are loaded. Python then keeps most of the arenas
# it grew for 50 concurrent responses and streams: with 200 clusters (a list is ~130 KB)
# the growth measured 12-23 MiB over 20-60 s, with 20 clusters 0-4 MiB. A leak of what
# one list makes would exceed the bound within the test's 20 s (~900 lists of 200
# clusters: over 100 MiB); leaks smaller than ~60 KB per request would not.
RSS_GROWTH_BOUND_MIB = 64


@dataclass
class LoadResult:
    clients: int
    window_s: float
    seeded: list[str]
    unloaded_ms: list[float] = field(default_factory=list)  # lists by one client, no load
    list_ms: list[float] = field(default_factory=list)  # lists under load (successful)
    creates: int = 0
    deletes: int = 0
    errors: list[str] = field(default_factory=list)
    events: list[int] = field(default_factory=list)  # per client, after its snapshot
    rss_start: int = 0  # bytes, the server process, before the clients came
    rss_peak: int = 0
    rss_end: int = 0  # after the clients left
    final: dict[str, Any] = field(default_factory=dict)  # the server's final list, by name
    disagreeing: dict[int, str] = field(default_factory=dict)  # client -> how its view differs

    @property
    def requests(self) -> int:
        """HTTP requests the server answered under load (each stream counts once)."""
        return len(self.list_ms) + self.creates + self.deletes + self.clients

    @property
    def rss_growth(self) -> int:
        return self.rss_end - self.rss_start


class Stream:
    """One client's event stream, folded into a view: name -> the cluster's JSON."""

    def __init__(self, server: Server, index: int, errors: list[str]) -> None:
        self.server = server
        self.index = index
        self.errors = errors
        self.view: dict[str, Any] = {}
        self.events = 0
        self.deleted: set[str] = set()  # names are never reused here: none may come back
        self.opened = asyncio.Event()  # the snapshot is in
        self.closing = False
        self._buffer = ""

    async def run(self) -> None:
        url = urlsplit(self.server.base)
        reader, writer = await asyncio.open_connection(url.hostname, url.port)
        try:
            writer.write(
                (
                    f"GET {url.path}raylab/events HTTP/1.1\r\nHost: {url.netloc}\r\n"
                    f"Authorization: token {self.server.token}\r\n"
                    "Accept: text/event-stream\r\n\r\n"
                ).encode()
            )
            status = (await reader.readline()).decode().split()
            headers = {}
            while (line := await reader.readline()) not in (b"\r\n", b""):
                key, _, value = line.decode().partition(":")
                headers[key.strip().lower()] = value.strip()
            if status[1:2] != ["200"]:
                self._error(f"answered {' '.join(status[1:])}")
                return
            chunked = headers.get("transfer-encoding") == "chunked"
            while True:
                if chunked:
                    size = int((await reader.readline()).split(b";")[0] or b"0", 16)
                    data = await reader.readexactly(size + 2) if size else b""
                    data = data[:-2]
                else:
                    data = await reader.read(65536)
                if not data:
                    break
                self._feed(data.decode())
            if not self.closing:
                self._error("the server ended the stream")
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            if not self.closing:
                self._error(f"broke: {exc!r}")
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    def _feed(self, text: str) -> None:
        self._buffer += text
        while "\n\n" in self._buffer:
            block, self._buffer = self._buffer.split("\n\n", 1)
            for line in block.splitlines():
                if line.startswith("data: "):
                    self._message(json.loads(line[6:]))

    def _message(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        if kind == "SNAPSHOT":
            self.view = {c["name"]: c for c in msg["clusters"]}
            if not msg["available"]:
                self._error(f"snapshot says unavailable: {msg['error']}")
            self.opened.set()
            return
        self.events += 1
        if kind in ("ADDED", "MODIFIED"):
            name = msg["cluster"]["name"]
            if name in self.deleted:
                self._error(f"{name} came back ({kind}, {msg['cluster']['phase']}) after DELETED")
            self.view[name] = msg["cluster"]
        elif kind == "DELETED":
            self.view.pop(msg["cluster"]["name"], None)
            self.deleted.add(msg["cluster"]["name"])
        elif kind == "STATUS":
            if not msg["available"]:
                self._error(f"status says unavailable: {msg['error']}")
        else:
            self._error(f"unknown message {msg!r:.200}")

    def _error(self, what: str) -> None:
        self.errors.append(f"stream {self.index}: {what}")


async def _pause(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)


class _Driver:
    def __init__(self, server: Server, result: LoadResult, list_pause_s: float) -> None:
        self.server = server
        self.result = result
        self.list_pause_s = list_pause_s
        self.http = AsyncHTTPClient(force_instance=True, max_clients=result.clients + 10)
        self.process = psutil.Process(server.proc.pid)
        self.last_list: dict[str, Any] = {}  # the last GET raylab/clusters, names only

    async def call(self, method: str, path: str, body: Any = None) -> HTTPResponse:
        return await self.http.fetch(
            self.server.base + path, method=method, headers=self.server.headers,
            body=None if body is None else json.dumps(body), raise_error=False,
            request_timeout=60, allow_nonstandard_methods=True,
        )  # fmt: skip

    async def clusters(self) -> dict[str, Any]:
        response = await self.call("GET", "raylab/clusters")
        if response.code != 200:
            raise RuntimeError(f"GET raylab/clusters answered {response.code}")
        body = json.loads(response.body)
        # For a timeout's message: what is there besides the seeded clusters.
        others = {c["name"]: c["phase"] for c in body["clusters"]}
        for name in self.result.seeded:
            others.pop(name, None)
        self.last_list = {**body, "clusters": f"the seeded ones and {others or 'no other'}"}
        return {c["name"]: c for c in body["clusters"]}

    async def until(self, what: str, probe: Any, timeout: float, every: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while not await probe():
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"timed out after {timeout:.0f} s waiting for {what}; the last list: "
                    f"{self.last_list}\n--- server log ---\n{self.server.log_tail()}"
                )
            await asyncio.sleep(every)

    async def only_seeded(self) -> bool:
        return sorted(await self.clusters()) == self.result.seeded

    async def warm_up(self) -> None:
        """Load what a first request loads (the watch, the Kubernetes client, the create
        path), so that the RSS at start is the server's, not its lazy imports'."""

        async def cache_full() -> bool:
            return set(self.result.seeded) <= set(await self.clusters())

        await self.until("the server's cache to hold the seeded clusters", cache_full, 300)
        made = await self.call("POST", "raylab/clusters", {"name": "warm-up", **SMALL})
        gone = await self.call("DELETE", "raylab/clusters/warm-up")
        if (made.code, gone.code) != (201, 204):
            raise RuntimeError(f"warm-up: create {made.code}, delete {gone.code}")
        try:
            await self.until("warm-up to be deleted", self.only_seeded, SETTLE_S)
        except RuntimeError:  # what the run checks for: count it, measure the rest
            listed = self.last_list["clusters"]
            self.result.errors.append(f"warm-up: deleted, still listed after 120 s: {listed}")
        # The operator may still be writing the seeded clusters' status: start when it
        # is done, so that every stream opens on the same state and sees the same events.
        last: dict[str, Any] = {}

        async def still() -> bool:
            nonlocal last
            now = await self.clusters()
            same, last = now == last, now
            return same

        await self.until("the clusters to stop changing", still, SETTLE_S, every=2.0)
        for _ in range(50):  # the anchor: one client alone, timed as the listers are
            t = time.perf_counter()
            response = await self.call("GET", "raylab/clusters")
            self.result.unloaded_ms.append((time.perf_counter() - t) * 1000)
            if response.code != 200:
                raise RuntimeError(f"GET raylab/clusters answered {response.code}")

    async def lister(self, stop: asyncio.Event, rng: random.Random) -> None:
        while not stop.is_set():
            t = time.perf_counter()
            try:
                response = await self.call("GET", "raylab/clusters")
            except Exception as exc:  # a refused or broken connection: count it, go on
                self.result.errors.append(f"list: {exc!r}")
            else:
                elapsed = (time.perf_counter() - t) * 1000
                try:
                    body = json.loads(response.body) if response.code == 200 else None
                except ValueError:
                    body = None
                if body is None:
                    self.result.errors.append(f"list: {response.code} {response.body[:200]!r}")
                elif not body["available"]:
                    self.result.errors.append(f"list: unavailable: {body['error']}")
                else:
                    self.result.list_ms.append(elapsed)
            await _pause(stop, self.list_pause_s * rng.uniform(0.5, 1.5))

    async def writer(self, stop: asyncio.Event, every_s: float) -> None:
        live: deque[str] = deque()
        n = 0
        while not stop.is_set():
            started = time.monotonic()
            name = f"{CHURN_PREFIX}{n:04d}"
            n += 1
            if await self.write("POST", "raylab/clusters", 201, {"name": name, **SMALL}):
                live.append(name)
                self.result.creates += 1
            if len(live) > KEEP:
                await self.delete(live.popleft())
            await _pause(stop, every_s - (time.monotonic() - started))
        while live:
            await self.delete(live.popleft())

    async def delete(self, name: str) -> None:
        if await self.write("DELETE", f"raylab/clusters/{name}", 204):
            self.result.deletes += 1

    async def write(self, method: str, path: str, expect: int, body: Any = None) -> bool:
        try:
            response = await self.call(method, path, body)
        except Exception as exc:
            self.result.errors.append(f"{method} {path}: {exc!r}")
            return False
        if response.code != expect:
            self.result.errors.append(f"{method} {path}: {response.code} {response.body[:300]!r}")
        return response.code == expect

    async def sample_rss(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self.result.rss_peak = max(self.result.rss_peak, self.process.memory_info().rss)
            await _pause(stop, 1.0)

    async def settle(self, streams: list[Stream]) -> None:
        """Wait until the list holds the seeded clusters only and every view equals it."""
        deadline = time.monotonic() + SETTLE_S
        while True:
            final = await self.clusters()
            disagreeing = {s.index: _difference(s.view, final) for s in streams}
            disagreeing = {i: d for i, d in disagreeing.items() if d}
            if sorted(final) == self.result.seeded and not disagreeing:
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        self.result.final = final
        self.result.disagreeing = disagreeing


def _difference(view: dict[str, Any], final: dict[str, Any]) -> str:
    """How a client's view differs from the server's list ("" when it does not)."""
    if view == final:
        return ""
    missing = sorted(final.keys() - view.keys())
    extra = sorted(view.keys() - final.keys())
    stale = sorted(n for n in final.keys() & view.keys() if view[n] != final[n])
    return f"missing {missing[:5]}, extra {extra[:5]}, stale {stale[:5]}"


async def drive(
    server: Server,
    seeded: list[str],
    clients: int = 50,
    window_s: float = 60.0,
    list_pause_s: float = 1.0,
    write_every_s: float = 1.0,
) -> LoadResult:
    """Run the load against a started server whose namespace holds `seeded` clusters."""
    result = LoadResult(clients=clients, window_s=window_s, seeded=sorted(seeded))
    driver = _Driver(server, result, list_pause_s)
    try:
        await driver.warm_up()
        result.rss_start = result.rss_peak = driver.process.memory_info().rss

        streams = [Stream(server, i, result.errors) for i in range(clients)]
        readers = [asyncio.create_task(s.run()) for s in streams]
        opened = asyncio.gather(*(s.opened.wait() for s in streams))
        try:
            await asyncio.wait_for(opened, 120)
        except TimeoutError:
            result.errors.append(
                f"only {sum(s.opened.is_set() for s in streams)}/{clients} streams opened"
            )

        stop = asyncio.Event()
        rng = random.Random(7)
        loops = [asyncio.create_task(driver.lister(stop, rng)) for _ in range(clients)]
        loops.append(asyncio.create_task(driver.sample_rss(stop)))
        write = asyncio.create_task(driver.writer(stop, write_every_s))
        await asyncio.sleep(window_s)
        stop.set()
        await asyncio.gather(*loops)
        await write

        await driver.settle(streams)
        result.events = [s.events for s in streams]
        for s in streams:
            s.closing = True
        for task in readers:
            task.cancel()
        await asyncio.gather(*readers, return_exceptions=True)
        # The server ends a closed stream on its next write: at the latest the keepalive.
        await asyncio.sleep(16)
        result.rss_end = driver.process.memory_info().rss
        result.rss_peak = max(result.rss_peak, result.rss_end)
    finally:
        driver.http.close()
    return result
