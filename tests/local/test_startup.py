"""Local clusters on a busy machine: nodes start in turn, and a node that cannot start is
reported with its own error, at once, and kept for inspection.

A failing worker is made real by giving the backend a `ray` command whose worker starts
fail the way a broken environment fails them (the head is the real `ray start`): nothing
here can make Ray itself fail on cue.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from raylab.backends.local.backend import LocalBackend, _fatal_line, _log_error
from raylab.backends.local.processes import NodeProcess
from raylab.config import Settings
from raylab.errors import ClusterFailed
from raylab.model import Phase
from raylab.service import ClusterService

WORKER_ERROR = "ValueError: this worker's environment cannot start Ray"


def broken_worker_ray(folder: Path) -> str:
    """A `ray` that starts heads for real and fails every worker start."""
    real = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    script = folder / "ray"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in *--address=*) echo "' + WORKER_ERROR + '" >&2; exit 1 ;; esac\n'
        f'exec {real} "$@"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return str(script)


def test_a_worker_that_cannot_start_ends_the_wait_with_its_error(
    state_dir: Path, tmp_path: Path
) -> None:
    settings = Settings.from_config()
    backend = LocalBackend(state_dir, ray_executable=broken_worker_ray(tmp_path))
    service = ClusterService(backend, settings, "alice")
    service.create({"name": "broken1", "workers": 1, "cpus": "1", "memory": "1Gi"})
    try:
        with pytest.raises(ClusterFailed) as failed:
            # Far longer than the head and three quick worker tries take: the wait ends
            # because the cluster cannot become Ready, not because time ran out.
            service.wait("broken1", lambda c: c.phase == Phase.READY, timeout=900)
        assert failed.value.message == (
            f"cluster 'broken1' cannot become Ready: worker-1 exited: {WORKER_ERROR}"
        )
        assert "it was kept" in (failed.value.detail or "")
        info = service.get("broken1")  # kept for inspection, with the same reason
        assert info.phase == Phase.DEGRADED
        assert info.head_ready
        log = (state_dir / "broken1" / "worker-1.log").read_text()
        assert log.count(WORKER_ERROR) == 3  # started three times before giving up
    finally:
        service.delete("broken1")


def test_the_fatal_line_of_a_raylet_is_the_reason(tmp_path: Path) -> None:
    logs = tmp_path / "session_latest" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text(
        "[2026-11-30 23:43:49,296 I 9126 9166] (raylet) agent_manager.cc:81: Monitor agent\n"
        "[2026-11-30 23:44:04,813 C 9126 9126] (raylet) node_manager.cc:3588:  An unexpected "
        "system state has occurred. You have likely discovered a bug in Ray. Check failed: "
        "statussetor3588.has_value() Timed out waiting for file /s/dashboard_agent_listen_port_1\n"
        "*** StackTrace Information ***\n"
    )
    node = NodeProcess("worker", 1, os.getpid(), 0.0, str(tmp_path / "w.log"), str(tmp_path))
    assert _fatal_line(node) == (
        "raylet: Timed out waiting for file /s/dashboard_agent_listen_port_1"
    )


def test_the_first_error_of_the_last_try_is_the_reason(tmp_path: Path) -> None:
    log = tmp_path / "head.log"
    log.write_text(
        "2026-11-30 23:19:25,957\tERROR services.py:1431 -- old try's error\n"
        "[raylab] the node exited with code 1 after 70 s before it came up; starting it "
        "again (2/3)\n"
        "2026-11-30 23:20:25,957\tERROR services.py:1431 -- Failed to start the dashboard \n"
        "2026-11-30 23:20:25,958\tERROR services.py:1456 -- Error should be written to "
        "'dashboard.log' or 'dashboard.err'.\n"
        "Traceback (most recent call last):\n"
        "Exception: \n"
    )
    assert _log_error(log).endswith("ERROR services.py:1431 -- Failed to start the dashboard")


def test_the_agent_port_file_is_the_one_ray_waits_for() -> None:
    import ray._raylet

    from raylab.backends.local.node import AGENT_PORT_FILE

    assert ray._raylet.DASHBOARD_AGENT_LISTEN_PORT_NAME == AGENT_PORT_FILE
