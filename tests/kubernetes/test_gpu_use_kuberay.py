"""GPU use and idle on KubeRay process pods: the real operator, real `ray start` in each
pod, and FAKE GPUs (tests/fake_gpu: no physical GPU exists here) that Ray's reporter in
the worker pod reads. The fake library reaches the worker containers as an admin would
give a GPU type's nodes their NVIDIA libraries: the profile's `worker_env`.

In order, as alice with the documented Role, from outside Kubernetes (the dashboard
through raylab's port-forward): the card's GPU use row; a busy GPU keeps the cluster in
use for hours of sweeps; a kernel's cell stamp is an annotation the culler counts; GPUs
that report nothing are "not measured", and the idle cluster is warned and suspended,
never shown as Failed on the way, with the reason every door reads.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client
from processnodes import PROCESS_GPU_TYPE, process_profile

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.culler.activity import ActivityReader
from raylab.culler.sweep import Culler
from raylab.display import render
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService
from tests.clock import Clock
from tests.fake_gpu import FakeGpus, served

from .kuberay_support import grant, is_ready, new_namespace, settings, wait_info

NAME = "gpu-use"
OWNER = "alice"
HOUR = 3600.0


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGpus]:
    # /tmp is private to each pod (harness/processnodes.py); /var/tmp is the machine's.
    root = Path(tempfile.mkdtemp(prefix="raylab-fake-gpu-", dir="/var/tmp"))
    try:
        gpus = FakeGpus(root)
        gpus.set("default", [(87, 61000, 81920), (2, 1000, 81920)])
        yield gpus
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def alice(
    alice_api: k8s_client.ApiClient,
    admin_api: k8s_client.ApiClient,
    process_nodes: list[str],
    fake: FakeGpus,
) -> Iterator[ClusterService]:
    env = {"LD_LIBRARY_PATH": str(fake.lib_dir), "RAYLAB_FAKE_NVML_DIR": str(fake.figures)}
    s = settings(
        gpu_types={PROCESS_GPU_TYPE: {**process_profile(), "worker_env": env}},
        default_gpu_type=PROCESS_GPU_TYPE,
        idle_suspend_minutes={PROCESS_GPU_TYPE: 2},
        idle_warning_minutes=1,
    )
    with new_namespace(admin_api, "rl-gpu") as namespace:
        grant(admin_api, namespace, OWNER)
        svc = ClusterService(KubeRayBackend(s, api_client=alice_api, namespace=namespace), s,
                             OWNER)  # fmt: skip
        try:
            yield svc
        finally:
            with contextlib.suppress(Exception):
                svc.delete(NAME)


@pytest.fixture(scope="module")
def cluster(alice: ClusterService) -> ClusterInfo:
    alice.create({"name": NAME, "gpus": 2, "workers": 1, "cpus": "1", "memory": "2Gi"})
    return wait_info(alice.backend, NAME, is_ready, "Ready", timeout=300)  # type: ignore[arg-type]


def reads(alice: ClusterService, utilization: float | None) -> ClusterInfo:
    return served(alice, NAME, utilization)


def test_the_card_shows_the_worker_pods_gpu_use(
    alice: ClusterService, cluster: ClusterInfo
) -> None:
    info = reads(alice, 44.5)
    assert ("GPU use", "45% · 61/160 GiB · 1 of 2 busy") in render.card_fields(info)
    assert info.gpu_use is not None
    assert len({g.node for g in info.gpu_use.gpus}) == 1  # the worker pod's; the head has none


def test_a_busy_gpu_keeps_it_in_use(alice: ClusterService, cluster: ClusterInfo) -> None:
    clock = Clock(time.time() + 600)
    culler = Culler(alice.backend, alice.settings, clock=clock)
    for _ in range(3):
        report = culler.sweep([alice.get(NAME)])
        assert (report.active, report.warned, report.suspended) == (1, [], [])
        clock.advance(HOUR / 3)
    assert alice.get(NAME).idle == IdleState()
    culler.close()


def test_a_cell_stamp_is_an_annotation_the_culler_counts(
    alice: ClusterService, cluster: ClusterInfo
) -> None:
    at = time.time()
    alice.backend.mark_cell(NAME, at)
    info = alice.get(NAME)
    assert info.cell_at == pytest.approx(at, abs=0.01)
    found = ActivityReader(alice.backend).read(info)
    assert found.state == "active"
    assert found.why.startswith("a notebook cell ran at ")


def test_gpus_reporting_nothing_are_idle_then_suspended_never_failed(
    alice: ClusterService, cluster: ClusterInfo, fake: FakeGpus
) -> None:
    (fake.figures / "default").unlink()
    info = reads(alice, None)
    assert ("GPU use", "—, no node reports a GPU") in render.card_fields(info)
    clock = Clock(time.time() + 600)  # the cell stamp long past
    culler = Culler(alice.backend, alice.settings, clock=clock)
    assert culler.sweep([alice.get(NAME)]).idle == 1
    clock.advance(60)
    assert culler.sweep([alice.get(NAME)]).warned == [NAME]
    clock.advance(60)
    phases: list[Phase] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            info = alice.backend.get(NAME)
            if info is not None:
                phases.append(info.phase)
            time.sleep(0.2)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        assert culler.sweep([alice.get(NAME)]).suspended == [NAME]
        gone = lambda i: i.phase == Phase.SUSPENDED  # noqa: E731
        suspended = wait_info(alice.backend, NAME, gone, "Suspended", timeout=120)  # type: ignore[arg-type]
        time.sleep(2)  # what the doors read while the pods go
    finally:
        done.set()
        watcher.join()
    assert Phase.FAILED not in phases
    assert suspended.reason.startswith("suspended after 2 min idle at ")
    assert render.phase_text(suspended) == f"Suspended — {suspended.reason}"
    culler.close()
