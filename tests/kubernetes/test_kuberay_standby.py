"""Standby clusters on KubeRay (raylab/standby), against the real API server, as alice
with the documented Role: the annotation that marks one, a claim that exactly one of
racing `up`s wins (a JSON patch testing the annotation), a delete that only an unclaimed
standby gets (a precondition on the version read), and the culler that ends one at its
time when no server is left to.

The clusters ask for a100 GPUs, which only the harness's simulated GPU nodes offer: their
pods are scheduled and never run, so no Ray starts here. The standby rules do not need
it (tests/local/test_standby.py runs real ones).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from controlplane import call_json
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import ENVIRONMENT_ANNOTATION, STANDBY_ANNOTATION
from raylab.culler.sweep import Culler
from raylab.model import ClusterEnvironment, ClusterInfo
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

from .kuberay_support import RAY, grant, new_namespace, settings

SETTINGS = settings(max_gpus_per_user=4)
SHAPE = {"gpus": 1, "workers": 1, "cpus": "1", "memory": "1Gi"}


@pytest.fixture(scope="module")
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-sb") as name:
        grant(admin_api, name, "alice")
        yield name


@pytest.fixture
def alice(alice_api: k8s_client.ApiClient, namespace: str) -> Iterator[KubeRayBackend]:
    backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)
    yield backend
    for info in backend.clusters():
        backend.delete(info.name, "Background")


def service(backend: KubeRayBackend) -> ClusterService:
    return ClusterService(backend, SETTINGS, "alice")


def new_standby(backend: KubeRayBackend, until: float | None = None) -> ClusterInfo:
    spec = ClusterSpec.from_mapping(SHAPE, SETTINGS.profiles)
    made = service(backend).create_standby(spec, until or time.time() + 600)
    assert made is not None
    return made


def raw(admin_api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = k8s_client.CustomObjectsApi(admin_api)
    obj: dict[str, Any] = call_json(
        custom.get_namespaced_custom_object, *RAY, namespace, "rayclusters", name
    )
    return obj


def at_once(calls: list[Callable[[], Any]]) -> list[Any]:
    """Run `calls` in threads released together; their results in order."""
    gate = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        gate.wait()
        results[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_a_standby_is_marked_listed_and_counted(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    standby = new_standby(alice)
    assert standby.standby_until is not None
    annotations = raw(admin_api, namespace, standby.name)["metadata"]["annotations"]
    assert float(annotations[STANDBY_ANNOTATION]) == pytest.approx(standby.standby_until, abs=1)
    (listed,) = alice.clusters(owner="alice")
    assert listed.standby_until == standby.standby_until
    assert service(alice).quota().gpus_used == 1


def test_of_racing_claims_exactly_one_wins(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    standby = new_standby(alice)
    env = ClusterEnvironment(working_dir="/home/alice/work")
    claims = at_once([lambda: alice.claim(standby.name, env) for _ in range(4)])
    won = [c for c in claims if c is not None]
    assert len(won) == 1, claims
    assert won[0].standby_until is None
    assert won[0].environment == env
    annotations = raw(admin_api, namespace, standby.name)["metadata"]["annotations"]
    assert STANDBY_ANNOTATION not in annotations
    assert ENVIRONMENT_ANNOTATION in annotations
    # Claimed, it is theirs: a standby's end no longer deletes it.
    assert alice.retire_standby(standby.name) is False
    assert alice.get(standby.name) is not None


def test_a_claim_and_a_retire_racing_one_wins(alice: KubeRayBackend) -> None:
    for _ in range(3):
        name = new_standby(alice).name
        claimed, retired = at_once(
            [partial(alice.claim, name, None), partial(alice.retire_standby, name)]
        )
        assert (claimed is not None) != retired, (claimed, retired)
        if claimed is not None:
            alice.delete(name, "Background")


def test_up_claims_a_standby_still_on_its_way(alice: KubeRayBackend) -> None:
    standby = new_standby(alice)
    lines: list[str] = []
    info, created = service(alice).create(dict(SHAPE), say=lines.append)
    assert created
    assert info.name == standby.name
    assert info.standby_until is None
    assert lines == [f"Claimed the standby cluster {standby.name} ({info.phase})."]
    # The next `up` of that shape finds none, and starts its own.
    other, _ = service(alice).create(dict(SHAPE), say=lines.append)
    assert other.name != standby.name
    assert len(lines) == 1


def test_the_culler_ends_a_standby_at_its_time(alice: KubeRayBackend) -> None:
    ended = new_standby(alice, until=time.time() + 2)
    waiting = new_standby(alice)
    culler = Culler(alice, SETTINGS, clock=lambda: time.time() + 5)
    report = culler.sweep(alice.clusters())
    culler.close()
    assert report.retired == [ended.name]
    assert report.suspended == []
    assert report.warned == []
    gone = alice.get(ended.name)
    assert gone is None or gone.phase == "Deleting"
    kept = alice.get(waiting.name)
    assert kept is not None
    assert kept.standby_until is not None
