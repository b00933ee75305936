"""A step of the machine's clock never makes a live node look dead.

The local backend tells a node's process from a later one that reused its pid by when it
started. psutil's create_time adds the boot time as the wall clock sees it at each call,
so after the clock stepped (NTP, a paused or forked VM) every node started before the
step looked like a stranger: CI once saw live clusters Failed with "head process exited:
it stopped with no error in its log (killed from outside?)". The step is made where
psutil sees it, its boot time: stepping this machine's clock would step every other
test's too.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from raylab.backends.local.node import started
from raylab.backends.local.processes import NodeProcess, alive, spawn

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="psutil's boot time is stepped on Linux"
)


@pytest.fixture
def node(tmp_path: Path) -> Iterator[NodeProcess]:
    one = spawn(["sleep", "300"], tmp_path / "node.log", "head", 0, {})
    yield one
    with contextlib.suppress(psutil.Error):
        psutil.Process(one.pid).kill()


def step_the_clock(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    boot = psutil.boot_time()
    monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: boot + seconds)  # type: ignore[attr-defined]
    monkeypatch.setattr(psutil, "boot_time", lambda: boot + seconds)


def test_a_live_node_stays_alive_when_the_clock_steps(
    node: NodeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = psutil.Process(node.pid).create_time()
    step_the_clock(monkeypatch, 3600)
    assert psutil.Process(node.pid).create_time() - before == pytest.approx(3600)  # stepped
    assert alive(node)
    psutil.Process(node.pid).kill()
    deadline = time.monotonic() + 10
    while alive(node) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(node)  # and a node that ended is seen to have ended


def test_a_pid_reused_by_another_process_is_not_the_node(node: NodeProcess) -> None:
    later = NodeProcess(**{**node.to_json(), "started": node.started - 2})
    assert alive(node)
    assert not alive(later)


def test_a_node_recorded_by_an_earlier_raylab_is_still_known(
    node: NodeProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Earlier state files hold psutil's wall-clock create_time: read as such, once."""
    old = node.to_json()
    old["create_time"] = psutil.Process(node.pid).create_time()
    del old["started"]
    read = NodeProcess.from_json(json.loads(json.dumps(old)))
    assert read.started == pytest.approx(started(node.pid), abs=0.05)
    assert alive(read)
    step_the_clock(monkeypatch, -7200)
    assert alive(read)
