"""What raylab's Serve proxy costs: the same requests through Jupyter and straight to Serve.

A real `jupyter lab` (tests/ui/lab_server.py: token off, as the browser tests run it)
and a real local cluster (`--workers 0`, one CPU) with one Serve app, deployed from this
process as a connected kernel deploys it (`serve.run`, at the cluster's own port). Two
kinds of request, each over one kept-alive connection per client, in rounds that
alternate the two paths (Serve's own port, the anchor; raylab's proxy):

- small JSON: latency p50 and p99 over REQUESTS sequential requests, and throughput over
  the same count sent by CONCURRENCY clients;
- 1 MB responses: latency p50 and throughput likewise.

Targets (issue 38): p50 ≤ 1.2× direct + 1 ms; throughput ≥ 0.8× direct.
Run: `tests/netns.sh .venv/bin/python bench/bench_serve.py`.
"""

from __future__ import annotations

import getpass
import http.client
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from report import Figure, emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.ui.lab_server import running_lab  # noqa: E402

NAME = "bench-serve"
REQUESTS = int(os.environ.get("BENCH_SERVE_REQUESTS", "300"))
CONCURRENCY = 8
ROUNDS = int(os.environ.get("BENCH_SERVE_ROUNDS", "3"))
MEGABYTE = 1024 * 1024


def _deploy(serve_url: str) -> None:
    from IPython.core.interactiveshell import InteractiveShell
    from ray import serve

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "raylab")
    shell.run_line_magic("raycluster", f"connect {NAME}")

    @serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=64)
    class Bench:
        def __init__(self) -> None:
            self.big = b"x" * MEGABYTE

        async def __call__(self, request: Any) -> Any:
            from starlette.responses import Response

            if request.url.path.endswith("/big"):
                return Response(self.big, media_type="application/octet-stream")
            return {"ok": True, "n": 1}

    serve.run(Bench.bind(), name="bench", route_prefix="/b")
    shell.run_line_magic("raycluster", "disconnect")


def _client(base: str) -> Callable[[str], bytes]:
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=60)
    prefix = url.path.rstrip("/")

    def get(path: str) -> bytes:
        conn.request("GET", f"{prefix}/{path}")
        response = conn.getresponse()
        body = response.read()
        if response.status != 200:
            raise RuntimeError(f"{base}/{path}: HTTP {response.status} {body[:200]!r}")
        return body

    return get


def _latencies(base: str, path: str, count: int) -> list[float]:
    get = _client(base)
    get(path)  # the connection, opened
    out = []
    for _ in range(count):
        t = time.perf_counter()
        get(path)
        out.append(time.perf_counter() - t)
    return out


def _throughput(base: str, path: str, count: int) -> float:
    per = count // CONCURRENCY
    clients = [_client(base) for _ in range(CONCURRENCY)]
    for get in clients:
        get(path)
    errors: list[BaseException] = []

    def work(get: Callable[[str], bytes]) -> None:
        try:
            for _ in range(per):
                get(path)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(g,)) for g in clients]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    elapsed = time.perf_counter() - t
    if errors:
        raise errors[0]
    return per * CONCURRENCY / elapsed


def _p(xs: list[float], q: float) -> float:
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure() -> dict[str, Any]:
    from raylab.backends.local.backend import LocalBackend
    from raylab.config import Settings
    from raylab.model import Phase
    from raylab.service import ClusterService

    settings = Settings.from_config()
    svc = ClusterService(LocalBackend(settings.local_state_dir()), settings, getpass.getuser())
    figures: dict[str, Any] = {k: [] for k in (
        "small_direct", "small_proxy", "big_direct", "big_proxy",
        "small_tp_direct", "small_tp_proxy", "big_tp_direct", "big_tp_proxy",
    )}  # fmt: skip
    with running_lab() as lab:
        try:
            svc.create({"name": NAME, "workers": 0, "cpus": "1", "memory": "2Gi"})
            info = svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
            assert info.endpoints.serve
            _deploy(info.endpoints.serve)
            paths = {
                "direct": (info.endpoints.serve, "b"),
                "proxy": (f"{lab.url}/raylab/clusters/{NAME}/serve", "b"),
            }
            for _ in range(ROUNDS):
                for kind, (base, route) in paths.items():
                    figures[f"small_{kind}"] += _latencies(base, route, REQUESTS)
                    figures[f"big_{kind}"] += _latencies(base, f"{route}/big", REQUESTS // 10)
                    figures[f"small_tp_{kind}"].append(_throughput(base, route, REQUESTS))
                    figures[f"big_tp_{kind}"].append(
                        _throughput(base, f"{route}/big", REQUESTS // 5)
                    )
        finally:
            if svc.backend.get(NAME) is not None:
                svc.delete(NAME)
    return figures


def run() -> list[Figure]:
    f = measure()
    ms = 1000.0
    out = []
    for kind, label in (("small", "small JSON"), ("big", "1 MB response")):
        direct, proxy = f[f"{kind}_direct"], f[f"{kind}_proxy"]
        p50d, p50p = statistics.median(direct) * ms, statistics.median(proxy) * ms
        out.append(Figure(
            f"Serve {label} p50 through raylab's proxy", p50p, "ms",
            "≤ 1.2× direct + 1 ms", p50d, "straight to Serve's port",
            [x * ms for x in proxy], [x * ms for x in direct], p50p <= 1.2 * p50d + 1.0,
        ))  # fmt: skip
        out.append(Figure(
            f"Serve {label} p99 through raylab's proxy", _p(proxy, 0.99) * ms, "ms",
            "(reported)", _p(direct, 0.99) * ms, "straight to Serve's port",
        ))  # fmt: skip
        tpd, tpp = (
            statistics.median(f[f"{kind}_tp_direct"]),
            statistics.median(f[f"{kind}_tp_proxy"]),
        )
        out.append(Figure(
            f"Serve {label} throughput through raylab's proxy ({CONCURRENCY} clients)", tpp,
            "req/s", "≥ 0.8× direct", tpd, "straight to Serve's port",
            f[f"{kind}_tp_proxy"], f[f"{kind}_tp_direct"], tpp >= 0.8 * tpd,
        ))  # fmt: skip
    return out


if __name__ == "__main__":
    emit("Serve through raylab's proxy", run(), "serve")
