"""ActivityReader against a stand-in for Ray's dashboard (a real HTTP server answering in
the shapes Ray 2.60 answers, as tests/local/test_idle.py and test_gpu_use.py see them):
which requests it makes, with which token, what counts as work, and what it makes of
refusals, silence and GPU figures that cannot be true."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from raylab.culler.activity import ActivityReader, Rule
from raylab.model import ClusterInfo, Endpoints, Phase
from raylab.spec import ClusterSpec

NOW = 1_796_170_000.0


def gpu(util: Any, used: Any = 1000, total: Any = 81920, uuid: str = "") -> dict[str, Any]:
    return {"index": 0, "name": "A100", "uuid": uuid, "utilizationGpu": util,
            "memoryUsed": used, "memoryTotal": total}  # fmt: skip


class StandInDashboard:
    def __init__(self) -> None:
        self.drivers = "ACTIVE"  # a kernel is connected in every test: it is not work
        self.gpus: list[dict[str, Any]] = []
        self.tasks: list[dict[str, Any]] = []
        self.jobs: list[dict[str, Any]] = []
        self.status = 200
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                outer.seen.append((path, self.headers.get("X-Ray-Authorization")))
                if outer.status != 200:
                    self.send_response(outer.status)
                    self.end_headers()
                    return
                body: Any
                if path == "/api/component_activities":
                    body = {"driver": {"is_active": outer.drivers}}
                elif path == "/nodes":
                    node = {"ip": "10.0.0.2", "raylet": {"state": "ALIVE"}, "gpus": outer.gpus}
                    body = {"data": {"summary": [node]}}
                else:
                    items = outer.tasks if path == "/api/v0/tasks" else outer.jobs
                    body = {"data": {"result": {"total": 7, "result": items}}}
                data = json.dumps(body).encode()  # NaN goes out as NaN, as Python's would
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def paths(self) -> list[str]:
        return [p for p, _ in self.seen]


class TokenBackend:
    name = "local"

    def __init__(self) -> None:
        self.token_reads = 0

    def auth_token(self, name: str) -> str:
        self.token_reads += 1
        return f"token-{self.token_reads}"

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.dashboard

    def metrics_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.metrics  # none here: Serve's requests are tests/server's


@pytest.fixture
def dashboard() -> Iterator[StandInDashboard]:
    stand_in = StandInDashboard()
    yield stand_in
    stand_in.server.shutdown()


def cluster(url: str, gpus: int = 2, cell_at: float | None = None) -> ClusterInfo:
    spec = ClusterSpec("c", gpus, "a100" if gpus else "cpu", 1, "1", "1Gi")
    return ClusterInfo("c", "alice", "local", Phase.READY, spec, head_ready=True,
                       endpoints=Endpoints(dashboard=url), uid="u1", cell_at=cell_at)  # fmt: skip


def reader() -> tuple[ActivityReader, TokenBackend]:
    backend = TokenBackend()
    return ActivityReader(backend), backend  # type: ignore[arg-type]


def test_a_busy_gpu_costs_one_request_with_the_token(dashboard: StandInDashboard) -> None:
    read, backend = reader()
    dashboard.gpus = [gpu(87, 61000)]
    for _ in range(3):
        found = read.read(cluster(dashboard.url), now=NOW)
        assert (found.state, found.why) == ("active", "GPU 0 of 10.0.0.2 at 87%")
        assert found.gpu_use is not None
        assert found.gpu_use.busy == 1
    assert dashboard.seen == [("/nodes", "Bearer token-1")] * 3
    assert backend.token_reads == 1  # read once, kept by uid


def test_a_connected_kernel_that_runs_nothing_is_idle(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    dashboard.gpus = [gpu(2)]  # below the 5 % threshold
    found = read.read(cluster(dashboard.url), now=NOW)
    assert found.state == "idle"
    assert dashboard.paths() == ["/nodes", "/api/v0/tasks", "/api/v0/actors"]  # at most three
    assert found.gpu_use is not None
    assert found.gpu_use.measured
    assert found.gpu_use.busy == 0


def test_tasks_actor_methods_and_jobs_are_work(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    dashboard.tasks = [{"name": "A.work", "type": "ACTOR_TASK", "state": "RUNNING"},
                       {"name": "train", "type": "NORMAL_TASK", "state": "RUNNING"}]  # fmt: skip
    found = read.read(cluster(dashboard.url, gpus=0), now=NOW)
    assert (found.state, found.why) == ("active", "running: A.work, train")
    assert found.gpu_use is None  # no GPUs: no summary asked for
    dashboard.tasks = []
    dashboard.jobs = [{"name": "_ray_internal_job_actor_raysubmit_42", "state": "ALIVE"}]
    found = read.read(cluster(dashboard.url, gpus=0), now=NOW)
    assert (found.state, found.why) == ("active", "a Ray Job is running (raysubmit_42)")


def test_a_running_cell_is_work_without_a_request(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    found = read.read(cluster(dashboard.url, gpus=0, cell_at=NOW - 30), now=NOW)
    assert found.state == "active"
    assert found.why.startswith("a notebook cell ran at ")
    assert dashboard.seen == []
    # A stamp older than the window is history; one far in the future is not believed.
    for stamp in (NOW - 600, NOW + 3600):
        stale = read.read(cluster(dashboard.url, gpus=0, cell_at=stamp), Rule(), now=NOW)
        assert stale.state == "idle"


def test_the_old_rule_counts_a_connected_kernel(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    found = read.read(cluster(dashboard.url, gpus=0), Rule(kernel_is_work=True), now=NOW)
    assert (found.state, found.why) == (
        "active",
        "a driver is connected (a notebook kernel or job)",
    )
    assert dashboard.paths()[-1] == "/api/component_activities"


@pytest.mark.parametrize(
    ("figures", "why"),
    [
        ([gpu(float("nan"))], "utilization nan"),
        ([gpu(-3)], "utilization -3"),
        ([gpu(250)], "utilization 250"),
        ([gpu(50, used=90000, total=81920)], "memory 90000 of 81920 MiB"),
        ([gpu(50, total=0)], "memory 1000 of 0 MiB"),
        ([gpu(50, used=None)], "memory used None"),
        ([gpu(True)], "utilization True"),
    ],
)
def test_figures_that_cannot_be_true_are_unknown(
    dashboard: StandInDashboard, figures: list[dict[str, Any]], why: str
) -> None:
    read, _ = reader()
    dashboard.gpus = figures
    found = read.read(cluster(dashboard.url), now=NOW)
    use = found.gpu_use
    assert use is not None
    assert use.state == "unknown"
    assert use.gpus == ()
    assert why in use.why
    assert found.state == "idle"  # no figure is evidence of work: the other signals decide


def test_nodes_without_gpus_are_not_measured(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    found = read.read(cluster(dashboard.url), now=NOW)
    assert found.gpu_use is not None
    assert (found.gpu_use.state, found.gpu_use.why) == ("not_measured", "no node reports a GPU")
    assert found.state == "idle"


def test_one_machines_gpus_seen_by_every_node_count_once(dashboard: StandInDashboard) -> None:
    read, _ = reader()
    dashboard.gpus = [gpu(90, uuid="GPU-1"), gpu(90, uuid="GPU-1")]
    use = read.read_gpu_use(cluster(dashboard.url))
    assert (use.state, len(use.gpus)) == ("measured", 1)


def test_refusals_and_silence_are_unknown(dashboard: StandInDashboard) -> None:
    backend = TokenBackend()
    read = ActivityReader(backend, timeout=2)  # type: ignore[arg-type]
    dashboard.status = 401
    found = read.read(cluster(dashboard.url), now=NOW)
    assert (found.state, found.why) == ("unknown", "the dashboard refused the cluster's token")
    assert found.gpu_use is not None
    assert found.gpu_use.state == "unknown"
    dashboard.status = 200
    assert read.read(cluster(dashboard.url), now=NOW).state == "idle"
    assert backend.token_reads == 2  # a refused token is read again
    dashboard.server.shutdown()
    dashboard.server.server_close()
    gone = read.read(cluster(dashboard.url), now=NOW)
    assert gone.state == "unknown"
    assert gone.why.startswith("the dashboard is unreachable")
