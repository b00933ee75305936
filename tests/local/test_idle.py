"""Idle suspension on a real local Ray cluster, with the culler's clock injected.

One head-only cluster serves the module. Activity is read for real from its dashboard
(with its token); only the culler's clock is moved, so an hour of idleness takes no
time. In order: a connected kernel keeps it in use however long; a running job and a
detached actor (whose creator has gone) keep it in use; with nothing left it is idle,
warned ("suspends at"), kept running (the clock restarts), warned again, suspended once
by two racing cullers with the reason shown; `resume` clears the reason.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import textwrap
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from raylab.auth import PROXY_HEADER, bearer
from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.activity import ActivityReader
from raylab.culler.sweep import Culler
from raylab.display import render
from raylab.kernel.connect import connected_cluster
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService

NAME = "idle1"
OWNER = os.environ.get("JUPYTERHUB_USER") or __import__("getpass").getuser()
# CPU clusters are never suspended by default; here after 2 min idle, warned 1 min ahead.
CONFIG = {"idle_suspend_minutes": {"cpu": 2}, "idle_warning_minutes": 1}
HOUR = 3600.0


class Clock:
    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


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
    def __init__(self, state: str, why: str = "") -> None:
        self.reader = ActivityReader(service().backend)
        self.state, self.why = state, why
        self.last: Any = None

    def __call__(self) -> bool:
        self.last = self.reader.read(current())
        return bool(self.last.state == self.state and self.why in self.last.why)

    def __repr__(self) -> str:
        return f"activity {self.state} {self.why!r}; last read: {self.last}"


def test_a_connected_kernel_is_never_suspended(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    magic(shell, f"connect {NAME}")
    assert connected_cluster() == NAME
    try:
        clock = Clock()
        c = culler(clock)
        for _ in range(5):  # ten hours of sweeps
            report = c.sweep([current()])
            assert (report.read, report.active, report.warned, report.suspended) == (
                1, 1, [], []
            )  # fmt: skip
            clock.advance(2 * HOUR)
        assert current().idle == IdleState()
        assert current().phase == Phase.READY
    finally:
        magic(shell, "disconnect")


def test_a_running_job_and_a_detached_actor_are_not_idle(cluster: ClusterInfo) -> None:
    job = submit(cluster, "import time; time.sleep(600)")  # never calls ray.init
    wait_for("the job runs", lambda: job_status(cluster, job) == "RUNNING")
    wait_for("the job counts", activity_is("active", "_ray_internal_job_actor"))
    dashboard(cluster, f"/api/jobs/{job}/stop", {})
    # A job that starts a detached actor running a long task, then ends.
    creator = submit(
        cluster,
        """
        import ray, time
        ray.init(namespace="idle-test")
        @ray.remote(num_cpus=1)
        class Worker:
            def work(self):
                time.sleep(3600)
        w = Worker.options(name="worker", lifetime="detached").remote()
        w.work.remote()
        time.sleep(2)
        """,
    )
    wait_for("the creator is done", lambda: job_status(cluster, creator) == "SUCCEEDED")
    wait_for("the actor alone keeps it in use", activity_is("active", "live actors: worker"))
    clock = Clock()
    c = culler(clock)
    for _ in range(3):
        assert c.sweep([current()]).active == 1
        clock.advance(HOUR)
    assert current().idle == IdleState()
    stop = submit(
        cluster,
        """
        import ray
        ray.init(namespace="idle-test")
        ray.kill(ray.get_actor("worker"))
        """,
    )
    wait_for("the actor is stopped", lambda: job_status(cluster, stop) == "SUCCEEDED")


def test_idle_is_warned_kept_then_suspended_with_the_reason(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    wait_for("nothing runs any more", activity_is("idle"))
    clock = Clock()
    first, second = culler(clock), culler(clock)
    t0 = clock.now
    assert first.sweep([current()]).idle == 1
    assert current().idle == IdleState(since=t0)
    assert "idle for 0 s" in magic(shell, "list")

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
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda c: c.sweep([seen]), (first, second)))
    assert sorted(len(r.suspended) for r in reports) == [0, 1]
    assert sorted(r.conflicts for r in reports) == [0, 1]
    suspended = current()
    assert suspended.phase == Phase.SUSPENDED
    reason = f"suspended after 2 min idle at {render.clock_text(clock.now)}"
    assert render.phase_text(suspended) == f"Suspended — {reason}"
    assert reason in magic(shell, "list")
    assert reason in magic(shell, f"status {NAME}")


def test_resume_brings_it_back_without_the_reason(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    assert current().phase == Phase.SUSPENDED
    magic(shell, f"resume {NAME}")
    info = service().wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
    assert info.idle == IdleState()
    assert "suspended after" not in magic(shell, "list")
