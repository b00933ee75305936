"""The local backend's lifecycle and failure modes, with real Ray processes.

Suspend/resume, a killed worker (Degraded), a killed head (Failed, with the reason), a
restart of whoever watches (state comes back from the folder), and `down` leaving no
process behind.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.model import ClusterInfo, Phase
from raylab.service import ClusterService
from tests.conftest import processes_of_this_session

NAME = "life1"


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> ClusterService:
    settings = Settings.from_config()
    return ClusterService(LocalBackend(settings.local_state_dir()), settings, "alice")


def ready(service: ClusterService) -> ClusterInfo:
    return service.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)


def node_pids(state_dir: Path) -> dict[str, int]:
    import json

    nodes = json.loads((state_dir / NAME / "cluster.json").read_text())["nodes"]
    return {("head" if n["role"] == "head" else f"worker-{n['index']}"): n["pid"] for n in nodes}


def failed(service: ClusterService) -> ClusterInfo:
    """The cluster as soon as it is Failed. `service.wait` would stop at Degraded on the
    way (a local node is not restarted, so it cannot become Ready), so this polls the
    backend."""
    deadline = time.monotonic() + 30
    while True:
        info = service.backend.get(NAME)
        assert info is not None
        if info.phase == Phase.FAILED or time.monotonic() > deadline:
            return info
        time.sleep(0.2)


def test_lifecycle(service: ClusterService, state_dir: Path) -> None:
    try:
        lifecycle(service, state_dir)
    finally:
        if service.backend.get(NAME) is not None:
            service.delete(NAME)


def lifecycle(service: ClusterService, state_dir: Path) -> None:
    info, created = service.create({"name": NAME, "workers": 1, "cpus": "1", "memory": "1Gi"})
    assert created
    assert info.phase in (Phase.STARTING, Phase.READY)
    info = ready(service)
    assert (info.workers_ready, info.workers_desired, info.head_ready) == (1, 1, True)

    # Suspend: every process ends, the definition stays.
    info = service.set_suspended(NAME, True)
    assert info.phase == Phase.SUSPENDED
    assert info.endpoints.client is None
    assert processes_of_this_session() == []
    assert [c.name for c in service.list()] == [NAME]

    service.set_suspended(NAME, False)
    ready(service)

    # A worker dies: Degraded, and the reason says which.
    os.killpg(node_pids(state_dir)["worker-1"], signal.SIGKILL)
    info = service.wait(NAME, lambda i: i.phase == Phase.DEGRADED, timeout=30)
    assert info.reason.startswith("worker-1 exited: "), info.reason
    assert info.workers_ready == 0

    # The head dies: Failed, with the reason, and nothing is deleted.
    os.killpg(node_pids(state_dir)["head"], signal.SIGKILL)
    info = failed(service)
    assert info.phase == Phase.FAILED
    assert info.reason.startswith("head process exited")

    # Whoever looks next (a restarted server, another kernel) sees the same.
    fresh = LocalBackend(state_dir)
    seen = fresh.get(NAME)
    assert seen is not None
    assert (seen.phase, seen.owner) == (Phase.FAILED, "alice")

    service.delete(NAME)
    assert service.backend.get(NAME) is None
    assert processes_of_this_session() == []


def test_other_users_do_not_see_it(service: ClusterService) -> None:
    bob = ClusterService(service.backend, service.settings, "bob")
    assert bob.list() == []
