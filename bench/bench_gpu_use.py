"""What reading GPU use costs the culler, and how soon a change in a GPU's use shows.

1. Cost, on a FAKE dashboard (a ThreadingHTTPServer on 127.0.0.1 in a child process,
   one per run, answering for any cluster by a path prefix: `/<name>/nodes?...`, with the
   cluster's token checked). 1,000 running GPU clusters (2 GPUs on one worker, idle limit
   on, fake backend with a counted method per Kubernetes request, ledger store counted):
   400 with a busy GPU, 200 running a task with their GPUs below the threshold, 400 idle.
   Today's rule (the anchor, `TodaysReader`: drivers, then live actors, copied from
   74d1e7a:raylab/culler/activity.py) is read by the same `Culler` over the same
   clusters. Figures: dashboard requests per cluster per sweep for each kind (target:
   new ≤ today + 1), backend/ledger calls in a steady sweep (target 0), and sweep seconds
   (median of SWEEPS each, alternating new and today's).
2. Latency, on a real local cluster (`--gpus 2 --workers 1`) whose worker loads the FAKE
   NVML library of tests/fake_gpu (there is no GPU here): a `Culler` sweeps every S = 2 s
   (standing in for cull_interval_seconds) in a thread; the fake's utilization is flipped
   10 % ↔ 90 % CHANGES times, and we time when `culler.gpu_use[uid].utilization` (what
   the card shows) first has the new mean, and when the dashboard's own
   `/nodes?view=summary` first has it (Ray's reporter), polled every 0.1 s with the token.

Run: `tests/netns.sh .venv/bin/python bench/bench_gpu_use.py`.
"""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from report import Figure, emit, median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CLUSTERS = int(os.environ.get("BENCH_GPU_USE_CLUSTERS", "1000"))
SWEEPS = int(os.environ.get("BENCH_GPU_USE_SWEEPS", "5"))  # timed sweeps of each rule
CHANGES = int(os.environ.get("BENCH_GPU_USE_CHANGES", "5"))
S = 2.0  # the latency part's sweep interval (cull_interval_seconds)
OWNERS = 50  # clusters' owners (a ledger each)
# name prefix -> its share of the clusters
KINDS = {"busy": 0.4, "tasks": 0.2, "idle": 0.4}
KIND_LABEL = {
    "busy": "busy GPU",
    "tasks": "a task running, GPUs below the threshold",
    "idle": "idle",
}

# ---------------------------------------------------------------- the FAKE dashboard


def _kind(path: str) -> str:
    """What a request is for (the paths of the new rule and of today's)."""
    if path.startswith("/nodes"):
        return "summary"
    if path.startswith("/api/v0/tasks"):
        return "tasks"
    if path.startswith("/api/v0/actors") and "JobSupervisor" in path:
        return "jobs"
    if path.startswith("/api/v0/actors"):
        return "actors"
    if path.startswith("/api/component_activities"):
        return "drivers"
    return "other"


def _listing(items: list[dict[str, Any]]) -> dict[str, Any]:
    return {"result": True, "data": {"result": {"total": len(items), "result": items}}}


def _answer(cluster: str, kind: str) -> dict[str, Any]:
    """What a FAKE cluster of this kind (its name's prefix) answers."""
    what = cluster.split("-", 1)[0]
    if kind == "summary":
        util = 87 if what == "busy" else (2 if what == "tasks" else 0)
        gpus = [
            {"index": i, "name": "FAKE A100", "uuid": f"GPU-{cluster}-{i}",
             "utilizationGpu": util, "memoryUsed": 61000 if util else 0, "memoryTotal": 81920}
            for i in range(2)
        ]  # fmt: skip
        return {"result": True, "data": {"summary": [
            {"ip": "10.0.0.1", "raylet": {"state": "ALIVE", "isHeadNode": True}, "gpus": []},
            {"ip": "10.0.0.2", "raylet": {"state": "ALIVE", "isHeadNode": False}, "gpus": gpus},
        ]}}  # fmt: skip
    if kind == "tasks":
        running = what in ("busy", "tasks")
        return _listing([{"name": "train", "state": "RUNNING"}] if running else [])
    if kind == "jobs":
        return _listing([])
    if kind == "drivers":  # today's rule: a driver runs the work
        return {"driver": {"is_active": "ACTIVE" if what != "idle" else "INACTIVE"}}
    if kind == "actors":
        return _listing([])
    return {}


def serve_fake_dashboard() -> None:
    """The child process: prints its port, counts requests by (cluster kind, endpoint);
    `GET /_counts` answers them and starts again from zero."""
    counts: dict[str, int] = {}
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/_counts":
                with lock:
                    body = dict(counts)
                    counts.clear()
                return self._send(200, body)
            _, cluster, rest = self.path.split("/", 2)
            if self.headers.get("X-Ray-Authorization") != f"Bearer token-{cluster}":
                return self._send(401, {"error": "token"})
            kind = _kind("/" + rest)
            key = f"{cluster.split('-', 1)[0]}/{kind}"
            with lock:
                counts[key] = counts.get(key, 0) + 1
            self._send(200, _answer(cluster, kind))

        def _send(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    ThreadingHTTPServer.request_queue_size = 256  # 16 readers at once: no SYN retries
    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


# ---------------------------------------------------------------- today's rule, the anchor


def todays_reader_class() -> type:
    from raylab.culler.activity import Activity, ActivityReader, _Unreadable

    drivers = "/api/component_activities?timeout=5"
    alive_actors = (
        "/api/v0/actors?filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
        "&limit=5&detail=false&timeout=5"
    )

    class TodaysReader(ActivityReader):
        """Today's rule: drivers then live actors (74d1e7a:raylab/culler/activity.py):
        one request for a busy cluster, two for an idle one, no GPU figures."""

        def read(self, info: Any, rule: Any = None, now: float | None = None) -> Any:
            try:
                address = self._address(info)
                token = self._token(info)
            except Exception as exc:  # RaylabError, as before
                return Activity("unknown", f"cannot reach the dashboard: {exc}")
            if not address:
                return Activity("unknown", "the cluster has no dashboard address")
            try:
                body = self._get(address, drivers, token)
                active = (body.get("driver") or {}).get("is_active")
                if active == "ACTIVE":
                    return Activity("active", "a driver is connected (a notebook kernel or job)")
                actors = self._get(address, alive_actors, token)
            except _Unreadable as exc:
                return Activity("unknown", str(exc))
            alive = ((actors.get("data") or {}).get("result") or {}).get("result") or []
            if alive:
                return Activity("active", "live actors")
            if active != "INACTIVE":
                return Activity("unknown", f"driver activity {active!r}")
            return Activity("idle")

    return TodaysReader


# ---------------------------------------------------------------- part 1: the cost


class FakeBackend:
    """The clusters as a watch holds them; every method but the pure ones counts as a
    Kubernetes request (a KubeRay backend's would be one)."""

    state_dir = None

    def __init__(self, clusters: dict[str, Any]) -> None:
        self.infos = clusters
        self.calls: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.calls[what] = self.calls.get(what, 0) + 1

    def auth_token(self, name: str) -> str:
        self._count("auth_token")
        return f"token-{name}"

    def update_idle(self, name: str, idle: Any, *, expected: Any = None,
                    suspend: bool = False, namespace: str | None = None) -> bool:  # fmt: skip
        self._count("update_idle")
        info = self.infos[name]
        if expected is not None and info.idle != expected:
            return False
        self.infos[name] = replace(info, idle=idle)  # what the watch then shows
        return True

    def dashboard_address(self, info: Any) -> str | None:  # pure: not counted
        return None

    def metrics_address(self, info: Any) -> str | None:  # no Serve here: not counted
        return None

    def __getattr__(self, name: str) -> Any:
        def counted(*args: Any, **kwargs: Any) -> None:
            self._count(name)

        return counted


class CountedStore:
    def __init__(self, store: Any) -> None:
        self.store, self.calls = store, 0

    def load(self, *args: Any) -> Any:
        self.calls += 1
        return self.store.load(*args)

    def save(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        self.store.save(*args, **kwargs)


def _clusters() -> dict[str, Any]:
    from raylab.model import ClusterInfo, Endpoints, Phase
    from raylab.profiles import Profiles
    from raylab.spec import ClusterSpec

    profiles = Profiles()
    out: dict[str, Any] = {}
    i = 0
    for kind, share in KINDS.items():
        for _ in range(round(CLUSTERS * share)):
            name = f"{kind}-{i:04d}"
            spec = ClusterSpec.from_mapping({"name": name, "gpus": 2, "workers": 1}, profiles)
            out[name] = ClusterInfo(
                name=name, owner=f"user{i % OWNERS:02d}", backend="kuberay",
                phase=Phase.READY, spec=spec, head_ready=True, workers_ready=1,
                workers_desired=1, uid=f"uid-{name}", namespace="bench",
                endpoints=Endpoints(dashboard=f"http://{name}-head-svc:8265"),
            )  # fmt: skip
            i += 1
    return out


def cost(tmp: Path) -> list[Figure]:
    from raylab.config import Settings
    from raylab.culler.activity import ActivityReader
    from raylab.culler.ledger import Meter
    from raylab.culler.ledger_store import LocalLedger
    from raylab.culler.sweep import Culler

    child = subprocess.Popen([sys.executable, __file__, "--fake-dashboard"],
                             stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        base = f"http://127.0.0.1:{port}"

        def server_counts() -> dict[str, int]:
            with urllib.request.urlopen(base + "/_counts", timeout=10) as r:
                return dict(json.loads(r.read()))

        infos = _clusters()
        assert all(i.quota_gpus > 0 for i in infos.values())
        settings = Settings.from_config(culler_dashboard_url=base + "/{name}",
                                        usage_flush_seconds=10**9)  # fmt: skip
        template = settings.options.culler_dashboard_url
        per_kind = {k: sum(1 for n in infos if n.startswith(k + "-")) for k in KINDS}
        rules: dict[str, dict[str, Any]] = {}
        for label, reader_class in (("new", ActivityReader), ("today", todays_reader_class())):
            backend = FakeBackend(dict(infos))
            store = CountedStore(LocalLedger(tmp / f"ledger-{label}"))
            meter = Meter(store, flush_s=10**9, retention_s=90 * 86400, max_gap_s=10**9)
            reader = reader_class(backend, address_template=template)
            culler = Culler(backend, settings, reader=reader, meter=meter)
            rules[label] = {"culler": culler, "backend": backend, "store": store,
                            "seconds": [], "requests": [], "steady_calls": [],
                            "by_kind": []}  # fmt: skip
        server_counts()

        def sweep(label: str, first: bool = False) -> None:
            r = rules[label]
            backend, store, culler = r["backend"], r["store"], r["culler"]
            calls0, store0 = sum(backend.calls.values()), store.calls
            before = dict(backend.calls)
            report = culler.sweep(list(backend.infos.values()))
            counts = server_counts()
            calls = sum(backend.calls.values()) - calls0 + store.calls - store0
            assert report.unknown == 0, f"{label}: {report}"
            if first:
                r["first"] = ({k: v - before.get(k, 0) for k, v in backend.calls.items()},
                              store.calls - store0, report)  # fmt: skip
                return
            r["seconds"].append(report.seconds)
            r["steady_calls"].append(calls)
            r["by_kind"].append({k: sum(v for key, v in counts.items()
                                        if key.startswith(k + "/")) / per_kind[k]
                                 for k in KINDS})  # fmt: skip
            print(f"{label}: {report.seconds:.2f} s, {report.active} active, "
                  f"{report.idle} idle, {calls} backend/ledger calls, {counts}")  # fmt: skip

        sweep("new", first=True)
        sweep("today", first=True)
        for _ in range(SWEEPS):
            sweep("new")
            sweep("today")
    finally:
        child.kill()
        child.wait()

    new, today = rules["new"], rules["today"]
    figures = []
    for kind in KINDS:
        n = median([b[kind] for b in new["by_kind"]])
        t = median([b[kind] for b in today["by_kind"]])
        figures.append(Figure(
            name=f"dashboard requests per cluster per sweep, {KIND_LABEL[kind]} "
                 f"({per_kind[kind]} clusters)",
            value=n, unit="requests", anchor=t, anchor_name="today's rule",
            target=f"≤ today + 1 ({t + 1:g})", met=n <= t + 1,
        ))  # fmt: skip
    calls, store_calls, report = new["first"]
    t_calls, t_store, _ = today["first"]
    figures.append(Figure(
        name=f"first sweep, backend + ledger calls ({calls.get('auth_token', 0)} tokens, "
             f"{report.writes} idle-since writes, {store_calls} ledger loads)",
        value=float(sum(calls.values()) + store_calls), unit="calls",
        anchor=float(sum(t_calls.values()) + t_store), anchor_name="today's rule",
        target="tokens once + writes + a ledger per owner",
    ))  # fmt: skip
    figures.append(Figure(
        name=f"steady sweep, Kubernetes (backend + ledger) requests, worst of {SWEEPS}",
        value=float(max(new["steady_calls"])), unit="requests",
        anchor=float(max(today["steady_calls"])), anchor_name="today's rule",
        target="0", met=max(new["steady_calls"]) == 0,
    ))  # fmt: skip
    figures.append(Figure(
        name=f"sweep time, {CLUSTERS} running GPU clusters (median of {SWEEPS}, alternating)",
        value=median(new["seconds"]), unit="s", anchor=median(today["seconds"]),
        anchor_name="today's rule", samples=new["seconds"], anchor_samples=today["seconds"],
        target="reported",
    ))  # fmt: skip
    return figures


# ---------------------------------------------------------------- part 2: the latency


def latency(tmp: Path) -> list[Figure]:
    from raylab.auth import PROXY_HEADER, bearer
    from raylab.backends.local.backend import LocalBackend
    from raylab.config import Settings
    from raylab.culler.gpu_use import SUMMARY, parse_summary
    from raylab.culler.sweep import Culler
    from raylab.model import Phase
    from raylab.service import ClusterService
    from tests.fake_gpu import FakeGpus

    name = "gpuuse"
    saved = {k: os.environ.get(k) for k in ("RAYLAB_STATE_DIR", "LD_LIBRARY_PATH",
                                            "RAYLAB_FAKE_NVML_DIR")}  # fmt: skip
    os.environ["RAYLAB_STATE_DIR"] = str(tmp / "state")
    fake = FakeGpus(tmp / "fake-gpu")  # FAKE NVML: this machine has no GPU
    os.environ.update(fake.env())  # before the cluster's nodes start

    def figures_at(util: float) -> list[tuple[float, float, float]]:
        return [(util, 20000, 81920), (util, 20000, 81920)]

    fake.set("worker-1", figures_at(10))
    settings = Settings.from_config(cull_interval_seconds=S)
    service = ClusterService(LocalBackend(settings.local_state_dir()), settings,
                             getpass.getuser())  # fmt: skip
    stop = threading.Event()
    seen: dict[str, list[tuple[float, float]]] = {"culler": [], "dashboard": []}
    threads: list[threading.Thread] = []
    results: list[tuple[float, float]] = []
    try:
        started = time.monotonic()
        service.create({"name": name, "gpus": 2, "workers": 1, "cpus": "1", "memory": "1Gi"})
        info = service.wait(name, lambda i: i.phase == Phase.READY, timeout=600)
        print(f"cluster Ready in {time.monotonic() - started:.0f} s")
        token = service.auth_token(name)
        address = info.endpoints.dashboard
        assert token
        assert address
        assert info.uid
        culler = Culler(service.backend, settings)

        def sweeps() -> None:
            while not stop.is_set():
                begun = time.monotonic()
                current = service.backend.get(name)
                if current is not None:
                    culler.sweep([current])
                stop.wait(max(0.0, S - (time.monotonic() - begun)))

        def dashboard() -> None:
            request = urllib.request.Request(address + SUMMARY,
                                             headers={PROXY_HEADER: bearer(token)})  # fmt: skip
            while not stop.is_set():
                try:
                    with urllib.request.urlopen(request, timeout=10) as r:
                        use = parse_summary(json.loads(r.read()), time.time(), 50)
                    if use.measured:
                        seen["dashboard"].append((time.monotonic(), use.utilization))
                except OSError:
                    pass
                stop.wait(0.1)

        threads = [threading.Thread(target=sweeps, daemon=True),
                   threading.Thread(target=dashboard, daemon=True)]  # fmt: skip
        for t in threads:
            t.start()

        def culler_reads() -> None:
            use = culler.gpu_use.get(info.uid)
            if use is not None and use.measured:
                seen["culler"].append((time.monotonic(), use.utilization))

        def first(where: str, value: float, after: float, timeout: float = 120) -> float:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                culler_reads()
                for at, util in seen[where]:
                    if at >= after and abs(util - value) < 0.5:
                        return at - after
                time.sleep(0.02)
            raise TimeoutError(f"{where} never showed {value} % (last: {seen[where][-3:]})")

        first("dashboard", 10, 0)
        first("culler", 10, 0)
        current = 10.0
        for k in range(CHANGES):
            time.sleep(1.0 + (0.7 * k) % S)  # changes fall at different points of a sweep
            current = 90.0 if current == 10.0 else 10.0
            fake.set("worker-1", figures_at(current))
            t0 = time.monotonic()
            card = first("culler", current, t0)
            ray = first("dashboard", current, t0)
            results.append((card, ray))
            print(f"→ {current:.0f} %: dashboard {ray:.2f} s, culler {card:.2f} s")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
        if service.backend.get(name) is not None:
            service.delete(name)
        for key, value in saved.items():  # the benches after this one (run.py)
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value

    shown = [s for s, _ in results]
    reported = [r for _, r in results]
    share = [s - r for s, r in results]
    target = f"≤ S + 1 s ({S + 1:g} s)"
    return [
        Figure(name=f"GPU change → culler.gpu_use (the card), median of {CHANGES}, S = {S:g} s",
               value=median(shown), unit="s", anchor=median(reported),
               anchor_name="Ray's dashboard alone", samples=shown, anchor_samples=reported,
               target=target, met=median(shown) <= S + 1),
        Figure(name="GPU change → culler.gpu_use (the card), worst", value=max(shown),
               unit="s", anchor=max(reported), anchor_name="Ray's dashboard alone",
               target=target, met=max(shown) <= S + 1),
        Figure(name="GPU change → Ray's /nodes?view=summary (the reporter), median",
               value=median(reported), unit="s", samples=reported, target="reported (Ray's)"),
        Figure(name="culler's own share (card - dashboard), median", value=median(share),
               unit="s", samples=share, target=target, met=median(share) <= S + 1),
        Figure(name="culler's own share (card - dashboard), worst", value=max(share),
               unit="s", target=target, met=max(share) <= S + 1),
    ]  # fmt: skip


def run() -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="raylab-bench-gpu-use-") as tmp:
        figures = cost(Path(tmp))
        figures += latency(Path(tmp))
    return figures


if __name__ == "__main__":
    if sys.argv[1:] == ["--fake-dashboard"]:
        serve_fake_dashboard()
    else:
        emit("Reading GPU use: its cost, and how soon a change shows", run(), "gpu_use")
