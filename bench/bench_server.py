"""The server extension's targets, on the real control plane with the real operator.

A real Jupyter server (subprocess) runs raylab with the KubeRay backend as user alice
(RBAC from docs/kubernetes-rbac.md). Then:

1. List latency with 1,000 clusters in its cache (suspended RayClusters, so no pods):
   p95 of `GET raylab/clusters` against one direct Kubernetes list of the same objects
   (what a server without a cache does per request). Target ≤ 20 ms.
2. Kubernetes API requests caused by 50 open event streams over 60 s, counted on the API
   server's side (its audit log of alice's requests), against 50 clients polling a list
   every 5 s for 60 s, counted the same way. Target: none beyond the one watch.
3. Event delivery: with the 50 streams open, the worker count of a cluster is changed
   (admin patch) 20 times; each stream notes when the change arrives. p95 from the
   patch's return to arrival. Target ≤ 100 ms.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from report import Figure, emit, p95

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

from tests.kubernetes.server_process import Server, raylab_server, seed  # noqa: E402

CLUSTERS = int(os.environ.get("BENCH_CLUSTERS", "1000"))
STREAMS = 50
WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", "60"))
CHANGES = 20
RAY = ("ray.io", "v1")


async def _streams(
    server: Server, count: int, arrivals: dict[int, list[float]], ready: asyncio.Event
) -> list[asyncio.Task[Any]]:
    from tornado.httpclient import AsyncHTTPClient, HTTPRequest

    AsyncHTTPClient.configure(None, max_clients=count + 10)
    opened = 0

    def on_chunk_for(i: int) -> Any:
        buffer = ""

        def on_chunk(chunk: bytes) -> None:
            nonlocal buffer, opened
            now = time.time()
            buffer += chunk.decode()
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                for line in block.splitlines():
                    if not line.startswith("data: "):
                        continue
                    msg = json.loads(line[6:])
                    if msg["type"] == "SNAPSHOT":
                        opened += 1
                        if opened == count:
                            ready.set()
                    elif msg["type"] == "MODIFIED" and msg["cluster"]["name"] == "load-0000":
                        arrivals[i].append(now)

        return on_chunk

    client = AsyncHTTPClient()
    tasks = []
    for i in range(count):
        arrivals[i] = []
        request = HTTPRequest(
            server.base + "raylab/events",
            headers={"Authorization": f"token {server.token}"},
            streaming_callback=on_chunk_for(i),
            request_timeout=3600,
        )
        tasks.append(asyncio.ensure_future(client.fetch(request, raise_error=False)))
    return tasks


def run() -> list[Figure]:
    from controlplane import ControlPlane, ensure_built

    with (
        tempfile.TemporaryDirectory(prefix="raylab-bench-server-") as tmp,
        ControlPlane(binaries=ensure_built()) as plane,
        raylab_server(plane, Path(tmp)) as (server, namespace),
    ):
        owner = server.get("api/me")["identity"]["username"]
        admin = plane.api_client("admin")
        t = time.perf_counter()
        seed(admin, namespace, owner, CLUSTERS)
        print(f"seeded {CLUSTERS} RayClusters in {time.perf_counter() - t:.0f} s")
        return measure(server, plane, admin, namespace)


def measure(server: Server, plane: Any, admin: Any, namespace: str) -> list[Figure]:
    from kubernetes import client

    # 1. list latency, from the cache
    deadline = time.monotonic() + 300
    while len(server.get("raylab/clusters")["clusters"]) < CLUSTERS:
        if time.monotonic() > deadline:
            raise RuntimeError("the server's cache never held every cluster")
        time.sleep(1)
    # Timed: the request until its last byte (what the server costs); the client's own
    # JSON parsing of the ~1 MB answer comes after the clock stops.
    lists = []
    request = urllib.request.Request(server.base + "raylab/clusters", headers=server.headers)
    for _ in range(200):
        t = time.perf_counter()
        with urllib.request.urlopen(request, timeout=60) as resp:
            raw = resp.read()
        lists.append((time.perf_counter() - t) * 1000)
    body = json.loads(raw)
    assert len(body["clusters"]) == CLUSTERS
    custom = client.CustomObjectsApi(plane.api_client("alice"))
    direct = []
    for _ in range(20):
        t = time.perf_counter()
        custom.list_namespaced_custom_object(*RAY, namespace, "rayclusters")
        direct.append((time.perf_counter() - t) * 1000)

    # 2 and 3: 50 streams for the window, with 20 changes in it
    arrivals: dict[int, list[float]] = {}
    changes: list[float] = []

    async def streams_window() -> int:
        ready = asyncio.Event()
        tasks = await _streams(server, STREAMS, arrivals, ready)
        await asyncio.wait_for(ready.wait(), 120)
        since = time.time()
        patcher = client.CustomObjectsApi(admin)
        loop = asyncio.get_running_loop()
        for i in range(CHANGES):
            await asyncio.sleep(WINDOW_S / (CHANGES + 1))
            # A JSON patch (a list body): a merge patch would replace the whole list.
            patch = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas",
                      "value": 2 + i % 2}]  # fmt: skip
            await loop.run_in_executor(
                None,
                lambda p=patch: patcher.patch_namespaced_custom_object(
                    *RAY,
                    namespace,
                    "rayclusters",
                    "load-0000",
                    p,
                    _content_type="application/json-patch+json",
                ),
            )
            changes.append(time.time())
        await asyncio.sleep(max(0.0, since + WINDOW_S - time.time()))
        for task in tasks:
            task.cancel()
        # Collected, so that the closed streams end quietly instead of logging tracebacks.
        await asyncio.gather(*tasks, return_exceptions=True)
        time.sleep(2)  # the audit log is written as requests complete
        return len(plane.audited_requests("alice", since=since))

    stream_requests = asyncio.run(streams_window())
    # Replicas alternate 2 and 3, so each change is a visible change of the cluster.
    delays = []
    for per_stream in arrivals.values():
        for at in per_stream:
            before = [c for c in changes if c <= at + 0.05]
            if before:
                delays.append(max(0.0, (at - before[-1])) * 1000)

    # the anchor for 2: 50 clients polling every 5 s
    since = time.time()
    stop = threading.Event()

    def poller() -> None:
        api = client.CustomObjectsApi(plane.api_client("alice"))
        while not stop.wait(0):
            api.list_namespaced_custom_object(*RAY, namespace, "rayclusters", limit=1)
            if stop.wait(5.0):
                return

    threads = [threading.Thread(target=poller, daemon=True) for _ in range(STREAMS)]
    for th in threads:
        th.start()
    time.sleep(WINDOW_S)
    stop.set()
    for th in threads:
        th.join(10)
    time.sleep(2)
    polling_requests = len(plane.audited_requests("alice", since=since))

    return [
        Figure(
            name=f"GET raylab/clusters, {CLUSTERS} clusters (p95)", value=p95(lists), unit="ms",
            target="≤ 20 ms", anchor=p95(direct), anchor_name="direct Kubernetes list",
            samples=lists, anchor_samples=direct, met=p95(lists) <= 20,
        ),
        Figure(
            name=f"API requests, {STREAMS} event streams × {WINDOW_S:.0f} s", unit="requests",
            value=float(stream_requests), target="none beyond the one watch",
            anchor=float(polling_requests), anchor_name=f"{STREAMS} clients polling every 5 s",
            met=stream_requests == 0,
        ),
        Figure(
            name=f"event delivery to {STREAMS} streams (p95)", value=p95(delays), unit="ms",
            target="≤ 100 ms", samples=delays, met=bool(delays) and p95(delays) <= 100,
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    emit("Server extension", run(), "server")
