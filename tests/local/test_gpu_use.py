"""GPU use on a real local Ray cluster whose worker has FAKE GPUs: Ray's own reporter
agent reads them through tests/fake_gpu's libnvidia-ml.so.1 (the one fake here: there is
no physical GPU), and its dashboard serves them. Only the culler's clock is moved.

In order: the card, `status` and `list` show the use; a busy GPU is work and is never
suspended, and /metrics shows it; used GPU-hours are metered against held ones; a
worker whose GPUs report nothing is "not measured", never 0 %, and no evidence of work.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from prometheus_client import REGISTRY, generate_latest

from raylab import metrics
from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.sweep import Culler
from raylab.display import render
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService
from tests.clock import Clock
from tests.fake_gpu import FakeGpus, served
from tests.ledgers import ledgers_put_back

NAME = "gpuse1"
OWNER = os.environ.get("JUPYTERHUB_USER") or __import__("getpass").getuser()
CONFIG = {"idle_suspend_minutes": {"a100": 2}, "idle_warning_minutes": 1}
HOUR = 3600.0
BUSY = [(87, 61000, 81920), (2, 1000, 81920)]  # one busy GPU, one resting


def service() -> ClusterService:
    s = Settings.from_config(**CONFIG)
    return ClusterService(LocalBackend(s.local_state_dir()), s, OWNER)


def current() -> ClusterInfo:
    return service().get(NAME)


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGpus]:
    gpus = FakeGpus(tmp_path_factory.mktemp("fake-gpu"))
    gpus.set("worker-1", BUSY)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in gpus.env().items():  # the nodes inherit it
            mp.setenv(key, value)
        yield gpus


@pytest.fixture(scope="module")
def cluster(fake: FakeGpus) -> Iterator[ClusterInfo]:
    svc = service()
    # The ledger is the session's: later modules must not be billed for this module's
    # hours (its cullers meter with clocks an hour away).
    with ledgers_put_back(svc.settings.local_state_dir(), [OWNER]):
        yield from made(svc)


def made(svc: ClusterService) -> Iterator[ClusterInfo]:
    try:
        svc.create({"name": NAME, "workers": 1, "gpus": 2, "cpus": "1", "memory": "2Gi"})
        yield svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
    finally:
        if svc.backend.get(NAME) is not None:
            svc.delete(NAME)


def reads(utilization: float | None) -> ClusterInfo:
    return served(service(), NAME, utilization)


def magic(shell: InteractiveShell, line: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell.run_line_magic("raycluster", line)
    return out.getvalue()


def test_the_card_status_and_list_show_gpu_use(
    cluster: ClusterInfo, shell: InteractiveShell
) -> None:
    info = reads(44.5)
    row = "45% · 61/160 GiB · 1 of 2 busy"
    assert ("GPU use", row) in render.card_fields(info)
    assert f"GPU use: {row}" in magic(shell, f"status {NAME}")
    listed = magic(shell, "list")
    assert "GPU USE" in listed
    assert "45% · 1/2 busy" in listed


def test_a_busy_gpu_is_work_and_shows_in_metrics(cluster: ClusterInfo) -> None:
    reads(44.5)
    clock = Clock(time.time() + 600)
    c = Culler(service().backend, service().settings, clock=clock)
    for _ in range(3):
        report = c.sweep([current()])
        assert (report.active, report.warned, report.suspended) == (1, [], [])
        clock.advance(HOUR / 3)  # ten times the idle limit, in all
    assert current().idle == IdleState()
    use = c.gpu_use[current().uid]
    assert len(use.history) == 3  # the sparkline's points: the last hour
    assert {u for _, u in use.history} == {44.5}
    metrics.set_cluster_source("test-gpu-use", lambda: c.with_gpu_use([current()]))
    try:
        text = generate_latest(REGISTRY).decode()
    finally:
        metrics.set_cluster_source("test-gpu-use", None)
    assert (
        f'raylab_gpu_utilization_percent{{cluster="{NAME}",gpu_type="a100",user="{OWNER}"}} 44.5'
        in text
    )
    assert f'raylab_gpus_busy{{gpu_type="a100",user="{OWNER}"}} 1.0' in text


def test_used_gpu_hours_are_metered_against_held(
    cluster: ClusterInfo, fake: FakeGpus, shell: InteractiveShell
) -> None:
    fake.set("worker-1", [(100, 40000, 81920), (0, 1000, 81920)])
    reads(50.0)
    clock = Clock(time.time() - HOUR)  # an hour of sweeps, ending now
    c = Culler(service().backend, service().settings, clock=clock)
    unread = []
    for _ in range(61):
        report = c.sweep([current()])
        if report.unknown:  # a read that timed out is held, not measured: say so if it fails
            unread.append(c.gpu_use.get(current().uid))
        clock.advance(60)
    c.close()  # writes the ledger
    uid = current().uid
    usage = service().usage(2 * HOUR)
    seen = f"{usage.to_json()}; unread sweeps: {unread}"
    assert usage.clusters[uid] == pytest.approx(2.0, abs=0.05), seen  # 2 GPUs for an hour
    # Every sweep that read the GPUs found one of two busy: used is half the measured.
    measured = 2.0 - len(unread) * 2 * 60 / HOUR
    assert usage.clusters_measured[uid] == pytest.approx(measured, abs=0.05), seen
    assert usage.clusters_used[uid] == pytest.approx(measured / 2, abs=0.05), seen
    assert "USED/HELD" in magic(shell, "usage")
    body: dict[str, Any] = usage.to_json()
    assert body["clusters_used"][uid] == pytest.approx(measured / 2, abs=0.05)


def test_gpus_that_report_nothing_are_not_measured_and_still_idle(
    cluster: ClusterInfo, fake: FakeGpus, shell: InteractiveShell
) -> None:
    (fake.figures / "worker-1").unlink()
    info = reads(None)
    assert ("GPU use", "—, logical GPUs") in render.card_fields(info)  # never 0 %
    assert "GPU use: —, logical GPUs" in magic(shell, f"status {NAME}")
    clock = Clock(time.time() + 600)
    c = Culler(service().backend, service().settings, clock=clock)
    assert c.sweep([current()]).idle == 1  # no figure is evidence of work
    clock.advance(60)
    assert c.sweep([current()]).warned == [NAME]
    path: Path = fake.figures / "worker-1"
    assert not path.exists()
