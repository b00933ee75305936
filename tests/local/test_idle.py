"""Idle suspension on a real local Ray cluster, with the culler's clock injected.

One head-only cluster serves the module, and this test process is the notebook kernel
(the in-process IPython shell) connected to it as its Ray driver. Activity is read for
real from its dashboard (with its token); only the culler's clock is moved, so an hour
of idleness takes no time. In order: a connected kernel that runs nothing is idle (the
old rule, for an admin who keeps it, counts it); a running cell, a task, an actor
method and a job each keep it in use, while an actor that holds resources and runs
nothing does not; with nothing left it is idle, warned ("suspends at"), kept running
(the clock restarts), warned again, suspended once by two racing cullers with the
reason shown; the kernel then says so in one line, no cell hangs, and `resume` from it
reconnects it, without the reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import sys
import textwrap
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from raylab.auth import PROXY_HEADER, bearer
from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.activity import ActivityReader
from raylab.culler.sweep import Culler
from raylab.display import render
from raylab.kernel import driver_watch
from raylab.kernel.connect import connected_cluster
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService
from tests.clock import Clock

NAME = "idle1"
OWNER = os.environ.get("JUPYTERHUB_USER") or __import__("getpass").getuser()
# CPU clusters are never suspended by default; here after 2 min idle, warned 1 min ahead.
CONFIG = {"idle_suspend_minutes": {"cpu": 2}, "idle_warning_minutes": 1}
HOUR = 3600.0


def settings() -> Settings:
    return Settings.from_config(**CONFIG)


def service() -> ClusterService:
    s = settings()
    return ClusterService(LocalBackend(s.local_state_dir()), s, OWNER)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterInfo]:
    svc = service()
    try:
        svc.create({"name": NAME, "workers": 0, "cpus": "2"})
        yield svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
    finally:
        if connected_cluster() == NAME:
            from raylab.kernel.connect import disconnect

            disconnect()
        if svc.backend.get(NAME) is not None:
            svc.delete(NAME)


def magic(shell: InteractiveShell, line: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell.run_line_magic("raycluster", line)
    return out.getvalue()


def culler(clock: Clock) -> Culler:
    svc = service()
    return Culler(svc.backend, svc.settings, clock=clock)


def current() -> ClusterInfo:
    return service().get(NAME)


def dashboard(info: ClusterInfo, path: str, body: dict[str, Any] | None = None) -> Any:
    token = service().auth_token(NAME)
    assert token
    assert info.endpoints.dashboard
    request = urllib.request.Request(
        info.endpoints.dashboard + path,
        data=json.dumps(body).encode() if body is not None else None,
        headers={PROXY_HEADER: bearer(token), "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def submit(info: ClusterInfo, code: str) -> str:
    """A Ray job running `code` (as `ray job submit` sends it)."""
    entrypoint = f"python -c {shlex.quote(textwrap.dedent(code))}"
    reply = dashboard(info, "/api/jobs/", {"entrypoint": entrypoint})
    return str(reply["submission_id"])


def job_status(info: ClusterInfo, job: str) -> str:
    status = str(dashboard(info, f"/api/jobs/{job}")["status"])
    if status == "FAILED":
        logs = dashboard(info, f"/api/jobs/{job}/logs")["logs"]
        raise AssertionError(f"job {job} failed:\n{logs}")
    return status


def wait_for(what: str, probe: Any, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting until {what} ({probe!r})"
        time.sleep(1)


class activity_is:  # noqa: N801  (reads as a condition)
    """The activity as read now; `cells=False` leaves the kernel's cell stamp out, so that
    each other kind of work is seen on its own."""

    def __init__(self, state: str, why: str = "", *, cells: bool = False) -> None:
        self.reader = ActivityReader(service().backend)
        self.state, self.why, self.cells = state, why, cells
        self.last: Any = None

    def __call__(self) -> bool:
        info = current() if self.cells else replace(current(), cell_at=None)
        self.last = self.reader.read(info)
        return bool(self.last.state == self.state and self.why in self.last.why)

    def __repr__(self) -> str:
        return f"activity {self.state} {self.why!r}; last read: {self.last}"


def cell(shell: InteractiveShell, code: str) -> str:
    """Run `code` as a notebook cell (its hooks too: the cell stamp); what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        result = shell.run_cell(textwrap.dedent(code))
    if result.error_in_exec is not None:
        print(out.getvalue(), end="", file=sys.stderr)
    return out.getvalue()


def stays_in_use(clock: Clock) -> None:
    """Hours of sweeps while the work runs: never idle, never warned or suspended."""
    c = culler(clock)
    for _ in range(3):
        report = c.sweep([current()])
        assert (report.read, report.active, report.warned, report.suspended) == (1, 1, [], [])
        clock.advance(HOUR)
    assert current().idle == IdleState()


def test_a_connected_kernel_that_runs_nothing_is_idle(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    magic(shell, f"connect {NAME}")
    assert connected_cluster() == NAME
    wait_for("a connected, idle kernel reads as idle", activity_is("idle"))
    # An admin who keeps the old rule for the GPU type: a connected kernel is work.
    old = Settings.from_config(**CONFIG, connected_kernel_is_work=["cpu"])
    clock = Clock()
    kept = Culler(service().backend, old, clock=clock)
    report = kept.sweep([replace(current(), cell_at=None)])
    assert (report.active, report.idle) == (1, 0)
    assert current().idle == IdleState()


def test_each_kind_of_work_keeps_it_in_use(cluster: ClusterInfo, shell: InteractiveShell) -> None:
    assert connected_cluster() == NAME
    # A cell: the kernel stamps the cluster when a cell starts (from a background thread).
    before = time.time()
    cell(shell, "import ray, time")
    wait_for("the cell's stamp", lambda: (current().cell_at or 0) >= before - 1, timeout=30)
    assert activity_is("active", "a notebook cell ran at", cells=True)()
    # A task the kernel started (the cell that started it has ended).
    cell(
        shell,
        """
        @ray.remote(num_cpus=0.1)
        def train():
            time.sleep(600)
        ref = train.remote()
    """,
    )
    wait_for("the task counts", activity_is("active", "running: train"))
    stays_in_use(Clock(start=time.time() + 600))  # the cell's stamp long past
    cell(shell, "ray.cancel(ref, force=True)")
    # An actor holding resources and running nothing is not work; its method running is.
    cell(
        shell,
        """
        @ray.remote(num_cpus=0.1)
        class Holder:
            def work(self):
                time.sleep(600)
            def ping(self):
                return 1
        holder = Holder.remote()
        ray.get(holder.ping.remote())
    """,
    )
    wait_for("a resting actor is idle", activity_is("idle"))
    cell(shell, "busy = holder.work.remote()")
    wait_for("its method counts", activity_is("active", "running: Holder.work"))
    stays_in_use(Clock(start=time.time() + 600))
    cell(shell, "ray.kill(holder)")
    # A Ray Job whose entrypoint never calls Ray.
    job = submit(cluster, "import time; time.sleep(600)")
    wait_for("the job runs", lambda: job_status(cluster, job) == "RUNNING")
    wait_for("the job counts", activity_is("active", f"a Ray Job is running ({job})"))
    stays_in_use(Clock(start=time.time() + 600))
    dashboard(cluster, f"/api/jobs/{job}/stop", {})
    wait_for("nothing runs any more", activity_is("idle"))


def test_idle_is_warned_kept_then_suspended_with_the_reason(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    assert connected_cluster() == NAME  # the kernel stays connected throughout
    clock = Clock(start=time.time() + 600)  # the cells' stamps are long past
    first, second = culler(clock), culler(clock)
    t0 = clock.now
    assert first.sweep([current()]).idle == 1
    assert current().idle == IdleState(since=t0)
    assert "idle for " in magic(shell, "list")

    clock.advance(60)  # 2 min limit, warned 1 min ahead
    assert first.sweep([current()]).warned == [NAME]
    warned = current()
    assert warned.idle.suspend_at == t0 + 120
    at = render.clock_text(t0 + 120)
    status = magic(shell, f"status {NAME}")
    # The magic's own clock is the real one: the idle time shown is real time.
    assert "Idle: idle for " in status
    assert f"; suspends at {at}" in status
    assert f"`%raycluster keep {NAME}` keeps it running" in status

    assert "its idle clock starts again" in magic(shell, f"keep {NAME}")
    assert current().idle == IdleState()
    clock.advance(60)  # past the old deadline: nothing happens, the clock restarted
    report = first.sweep([current()])
    assert (report.warned, report.suspended) == ([], [])
    assert current().idle == IdleState(since=t0 + 120)

    clock.advance(60)
    assert first.sweep([current()]).warned == [NAME]
    assert current().idle.suspend_at == t0 + 240
    clock.advance(60)
    # Two cullers decide at once from the same view: one suspends, one is refused.
    seen = current()
    phases: list[Phase] = []
    watching = threading.Event()

    def watch() -> None:  # what every door reads while the processes stop
        while not watching.is_set():
            phases.append(current().phase)
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda c: c.sweep([seen]), (first, second)))
    watching.set()
    watcher.join()
    assert sorted(len(r.suspended) for r in reports) == [0, 1]
    assert sorted(r.conflicts for r in reports) == [0, 1]
    assert Phase.FAILED not in phases  # a suspension never shows as a failure
    suspended = current()
    assert suspended.phase == Phase.SUSPENDED
    reason = f"suspended after 2 min idle at {render.clock_text(clock.now)}"
    assert suspended.reason == reason  # the REST API's and the sidebar's reason too
    assert render.phase_text(suspended) == f"Suspended — {reason}"
    assert reason in magic(shell, "list")
    assert reason in magic(shell, f"status {NAME}")


def test_the_kernel_says_so_once_and_resume_reconnects_it(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    assert current().phase == Phase.SUSPENDED
    wait_for("the kernel notices", lambda: driver_watch.lost_pending() == NAME, timeout=60)
    started = time.monotonic()
    said = cell(shell, "ray.get(ray.put(1))")
    assert time.monotonic() - started < 30  # no cell hangs
    [line] = [line for line in said.splitlines() if NAME in line]  # one line
    assert line.startswith(f"Cluster {NAME} was suspended after 2 min idle at ")
    assert f"`%raycluster resume {NAME}` starts it again and reconnects this kernel" in line
    assert connected_cluster() is None
    assert NAME not in cell(shell, "1 + 1")  # said once
    resumed = magic(shell, f"resume {NAME}")
    assert "Connected this kernel to idle1" in resumed
    assert connected_cluster() == NAME
    info = current()
    assert info.idle == IdleState()
    assert "suspended after" not in magic(shell, "list")
    assert "42" in cell(shell, "print(ray.get(ray.put(41)) + 1)")
    magic(shell, "disconnect")
