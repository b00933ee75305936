"""ActivityReader against a stand-in for Ray's dashboard (a real HTTP server answering
what Ray 2.60 answers, as tests/local/test_idle.py sees it): which requests it makes,
with which token, and what it makes of refusals and silence."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from raylab.culler.activity import ActivityReader
from raylab.model import ClusterInfo, Endpoints, Phase
from raylab.spec import ClusterSpec


class StandInDashboard:
    def __init__(self) -> None:
        self.drivers = "INACTIVE"
        self.actors: list[dict[str, Any]] = []
        self.status = 200
        self.seen: list[tuple[str, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.seen.append(
                    (self.path.split("?")[0], self.headers.get("X-Ray-Authorization"))
                )
                if outer.status != 200:
                    self.send_response(outer.status)
                    self.end_headers()
                    return
                if self.path.startswith("/api/component_activities"):
                    body: Any = {"driver": {"is_active": outer.drivers}}
                else:
                    body = {"data": {"result": {"total": 7, "result": outer.actors}}}
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


class TokenBackend:
    name = "local"

    def __init__(self) -> None:
        self.token_reads = 0

    def auth_token(self, name: str) -> str:
        self.token_reads += 1
        return f"token-{self.token_reads}"

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.dashboard


@pytest.fixture
def dashboard() -> Iterator[StandInDashboard]:
    stand_in = StandInDashboard()
    yield stand_in
    stand_in.server.shutdown()


def cluster(url: str) -> ClusterInfo:
    spec = ClusterSpec("c", 0, "cpu", 0, "1", "1Gi")
    return ClusterInfo("c", "alice", "local", Phase.READY, spec, head_ready=True,
                       endpoints=Endpoints(dashboard=url), uid="u1")  # fmt: skip


def test_a_driver_costs_one_request_with_the_token(dashboard: StandInDashboard) -> None:
    backend = TokenBackend()
    reader = ActivityReader(backend)  # type: ignore[arg-type]
    dashboard.drivers = "ACTIVE"
    for _ in range(3):
        assert reader.read(cluster(dashboard.url)).state == "active"
    assert dashboard.seen == [("/api/component_activities", "Bearer token-1")] * 3
    assert backend.token_reads == 1  # read once, kept by uid


def test_idle_needs_no_driver_and_no_live_actor(dashboard: StandInDashboard) -> None:
    reader = ActivityReader(TokenBackend())  # type: ignore[arg-type]
    assert reader.read(cluster(dashboard.url)).state == "idle"  # `total` counts dead ones
    dashboard.actors = [{"name": "worker", "state": "ALIVE"}]
    found = reader.read(cluster(dashboard.url))
    assert (found.state, found.why) == ("active", "live actors: worker")
    assert [p for p, _ in dashboard.seen] == ["/api/component_activities", "/api/v0/actors"] * 2


def test_refusals_and_silence_are_unknown(dashboard: StandInDashboard) -> None:
    backend = TokenBackend()
    reader = ActivityReader(backend, timeout=2)  # type: ignore[arg-type]
    dashboard.status = 401
    found = reader.read(cluster(dashboard.url))
    assert (found.state, found.why) == ("unknown", "the dashboard refused the cluster's token")
    dashboard.status = 200
    assert reader.read(cluster(dashboard.url)).state == "idle"
    assert backend.token_reads == 2  # a refused token is read again
    dashboard.server.shutdown()
    dashboard.server.server_close()
    gone = reader.read(cluster(dashboard.url))
    assert gone.state == "unknown"
    assert gone.why.startswith("the dashboard is unreachable")
