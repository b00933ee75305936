"""The real Kueue runs in the test control plane and queues RayClusters, as users see it:
suspended on create by its webhook, admitted within quota (pods on the flavor's
nodes), pending beyond it (and listed so by the visibility API), admitted when quota
frees up. Clusters without a queue are left alone. KWOK nodes only: seconds per test.
"""

from __future__ import annotations

from typing import Any

import pytest
from controlplane import FAKE_NODES, ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from .kueue_support import (
    A100_FLAVOR,
    PRIORITY_CLASSES,
    create_local_queue,
    is_admitted,
    is_pending,
    kueue,  # noqa: F401  (fixture)
    kueue_queues,  # noqa: F401  (fixture)
    kwok_raycluster,
    pending_workloads,
    workload_for,
)

# Kueue running, with its flavors, ClusterQueue and priority classes, for every test.
pytestmark = pytest.mark.usefixtures("kueue_queues")

RAY = ("ray.io", "v1")
A100_NODES = {n.name for n in FAKE_NODES if n.gpu_type == "a100"}


def create(api: k8s_client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create a RayCluster; what the API server stored (after the webhooks)."""
    custom = k8s_client.CustomObjectsApi(api)
    stored: dict[str, Any] = call_json(
        custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", body
    )
    return stored


def read(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = k8s_client.CustomObjectsApi(api)
    got: dict[str, Any] = call_json(
        custom.get_namespaced_custom_object, *RAY, namespace, "rayclusters", name
    )
    return got


def delete(api: k8s_client.ApiClient, namespace: str, name: str) -> None:
    custom = k8s_client.CustomObjectsApi(api)
    call_json(custom.delete_namespaced_custom_object, *RAY, namespace, "rayclusters", name)


def suspended(api: k8s_client.ApiClient, namespace: str, name: str) -> bool:
    return bool(read(api, namespace, name)["spec"].get("suspend"))


def running_pods(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, str]:
    """Node type (head, worker) -> node of the cluster's Running pods."""
    pods = call_json(
        k8s_client.CoreV1Api(api).list_namespaced_pod,
        namespace,
        label_selector=f"ray.io/cluster={name}",
    )["items"]
    return {
        p["metadata"]["labels"]["ray.io/node-type"]: p["spec"].get("nodeName", "")
        for p in pods
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    }


def wait_admitted_and_running(api: k8s_client.ApiClient, namespace: str, name: str) -> None:
    wait_until(
        f"{name}'s Workload admitted",
        lambda: is_admitted(workload_for(api, namespace, name)),
        timeout=60,
        interval=0.2,
    )
    wait_until(f"{name} unsuspended", lambda: not suspended(api, namespace, name), 30, 0.2)

    def on_gpu_nodes() -> bool:
        pods = running_pods(api, namespace, name)
        return pods.get("worker") in A100_NODES and "head" in pods

    wait_until(f"{name}'s head and worker Running, the worker on A100", on_gpu_nodes, 60, 0.2)


def test_queued_rayclusters_wait_for_gpu_quota(
    namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    create_local_queue(admin_api, namespace)
    # Two 8-GPU clusters fill the quota of 16; the high priority keeps the third (low)
    # from preempting them.
    for name in ("first", "second"):
        stored = create(admin_api, namespace, kwok_raycluster(name, 8, priority_class="high"))
        assert stored["spec"]["suspend"] is True, "Kueue's webhook suspends it on create"
    for name in ("first", "second"):
        wait_admitted_and_running(admin_api, namespace, name)
    admitted = workload_for(admin_api, namespace, "first")
    assert admitted is not None
    flavors = admitted["status"]["admission"]["podSetAssignments"]
    assert any(a["flavors"].get("nvidia.com/gpu") == A100_FLAVOR for a in flavors)
    nodes = {running_pods(admin_api, namespace, n)["worker"] for n in ("first", "second")}
    assert nodes == A100_NODES, "one 8-GPU worker per A100 node"

    stored = create(admin_api, namespace, kwok_raycluster("third", 8, priority_class="low"))
    assert stored["spec"]["suspend"] is True
    wait_until(
        "third's Workload pending",
        lambda: is_pending(workload_for(admin_api, namespace, "third")),
        timeout=30,
        interval=0.2,
    )
    pending = wait_until(
        "the visibility API to list third",
        lambda: pending_workloads(admin_api, namespace),
        timeout=30,
        interval=0.2,
    )
    (item,) = pending
    third = workload_for(admin_api, namespace, "third")
    assert third is not None
    assert item["metadata"]["name"] == third["metadata"]["name"]
    assert item["positionInClusterQueue"] == 0
    assert item["priority"] == PRIORITY_CLASSES["low"]
    assert suspended(admin_api, namespace, "third")
    assert running_pods(admin_api, namespace, "third") == {}, "a suspended cluster has no pods"

    # Quota freed: the pending one is admitted and runs where "first" ran.
    delete(admin_api, namespace, "first")
    wait_admitted_and_running(admin_api, namespace, "third")
    assert pending_workloads(admin_api, namespace) == []
    # Not left to the namespace's deletion, which removes pods first and the rest
    # some 10 s later: the ClusterQueue (deleted after the module) waits for them.
    for name in ("second", "third"):
        delete(admin_api, namespace, name)


def test_rayclusters_without_a_queue_are_left_alone(
    namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    stored = create(admin_api, namespace, kwok_raycluster("free", 1, "h100", queue=None))
    assert not stored["spec"].get("suspend")

    def running() -> bool:
        pods = running_pods(admin_api, namespace, "free")
        return pods.get("worker") == "kwok-h100-0" and "head" in pods

    wait_until("free's head and worker Running", running, 60, 0.2)
    assert workload_for(admin_api, namespace, "free") is None
    assert not suspended(admin_api, namespace, "free")


def test_stopped_kueue_is_out_of_the_way_and_starts_again(
    control_plane: ControlPlane, namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    # What the other test modules see: no webhook, no aggregated API of Kueue's.
    control_plane.stop_kueue()
    try:
        assert not control_plane.kueue_running
        admission = k8s_client.AdmissionregistrationV1Api(admin_api)
        for lister in (
            admission.list_mutating_webhook_configuration,
            admission.list_validating_webhook_configuration,
        ):
            assert not [h for h in call_json(lister)["items"] if "kueue" in h["metadata"]["name"]]
        services = call_json(k8s_client.ApiregistrationV1Api(admin_api).list_api_service)
        # (The CRDs' own group stays, served by the API server itself.)
        assert not [s for s in services["items"] if s["spec"].get("service")]
        stored = create(admin_api, namespace, kwok_raycluster("unqueued", 1, "h100"))
        assert not stored["spec"].get("suspend"), "labelled, but no Kueue to suspend it"
        delete(admin_api, namespace, "unqueued")
    finally:
        control_plane.start_kueue()
    create_local_queue(admin_api, namespace)
    stored = create(admin_api, namespace, kwok_raycluster("queued", 8))
    assert stored["spec"]["suspend"] is True
    wait_admitted_and_running(admin_api, namespace, "queued")
    delete(admin_api, namespace, "queued")
