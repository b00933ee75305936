"""The local control plane behaves like a real cluster, as users would see it."""

from __future__ import annotations

import json
import time
from http import HTTPStatus
from typing import Any

import pytest
import urllib3
import yaml
from controlplane import (
    FAKE_NODES,
    GPU_RESOURCE,
    NODE_LEASE_SECONDS,
    USERS,
    ControlPlane,
    call_json,
    wait_until,
)
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from .kuberay_support import GPU_TOLERATION, KWOK_RAY_VERSION, kwok_raycluster

RAY = ("ray.io", "v1")
RAY_IMAGE = f"rayproject/ray:{KWOK_RAY_VERSION}"  # never pulled: KWOK pods run nothing
A100_NODES = {n.name for n in FAKE_NODES if n.gpu_type == "a100"}


def wait_raycluster_ready(
    api: k8s_client.ApiClient, namespace: str, name: str, timeout: float = 120
) -> dict[str, Any]:
    custom = k8s_client.CustomObjectsApi(api)

    def ready() -> dict[str, Any] | None:
        rc: dict[str, Any] = call_json(
            custom.get_namespaced_custom_object, *RAY, namespace, "rayclusters", name
        )
        status = rc.get("status") or {}  # a fresh object has no status yet
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if conditions.get("HeadPodReady") == "True" and status.get("readyWorkerReplicas") == 1:
            return rc
        return None

    return wait_until(f"RayCluster {namespace}/{name} ready", ready, timeout, 0.5)


def ray_pods(api: k8s_client.ApiClient, namespace: str, cluster: str) -> list[Any]:
    core = k8s_client.CoreV1Api(api)
    selector = f"ray.io/cluster={cluster}"
    pods: list[Any] = call_json(core.list_namespaced_pod, namespace, label_selector=selector)[
        "items"
    ]
    return pods


def has_condition(obj: dict[str, Any], type_: str, status: str = "True") -> bool:
    conditions = obj.get("status", {}).get("conditions") or []
    return any(c["type"] == type_ and c["status"] == status for c in conditions)


def forbidden(call: Any, *args: Any) -> bool:
    try:
        call_json(call, *args)
    except ApiException as exc:
        return bool(exc.status == HTTPStatus.FORBIDDEN)
    return False


def test_kubeconfigs_verify_tls_with_the_serving_ca(
    control_plane: ControlPlane,
) -> None:
    assert control_plane.server_url.startswith("https://127.0.0.1:")
    for user in USERS:
        cfg = yaml.safe_load(control_plane.kubeconfig(user).read_text())
        cluster = cfg["clusters"][0]["cluster"]
        assert cluster["server"] == control_plane.server_url
        assert cluster["certificate-authority-data"]
        assert "insecure-skip-tls-verify" not in cluster
        assert cfg["users"][0]["user"] == {"token": control_plane.token(user)}


def test_nodes_show_their_gpus_labels_and_taints(
    admin_api: k8s_client.ApiClient,
) -> None:
    items = call_json(k8s_client.CoreV1Api(admin_api).list_node)["items"]
    # The process nodes have tests of their own (test_procnode.py).
    nodes = {n["metadata"]["name"]: n for n in items if n["metadata"]["labels"]["type"] == "kwok"}
    assert set(nodes) == {n.name for n in FAKE_NODES}

    gpus = {name: n["status"]["allocatable"].get(GPU_RESOURCE) for name, n in nodes.items()}
    assert gpus == {
        "kwok-a100-0": "8",
        "kwok-a100-1": "8",
        "kwok-h100-0": "4",
        "kwok-cpu-0": None,
    }
    h100 = nodes["kwok-h100-0"]["metadata"]["labels"]
    assert h100["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert h100["raylab.io/gpu-type"] == "h100"
    for name in A100_NODES:
        labels = nodes[name]["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-80GB"
        assert labels["raylab.io/gpu-type"] == "a100"
    for name, node in nodes.items():
        assert has_condition(node, "Ready"), name
        taints = {(t["key"], t.get("value"), t["effect"]) for t in node["spec"].get("taints", [])}
        expected = set() if name == "kwok-cpu-0" else {(GPU_RESOURCE, "present", "NoSchedule")}
        assert taints == expected, name


def test_kwok_heartbeats_keep_the_nodes_alive(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient
) -> None:
    # Without renewed node Leases the node lifecycle controller would taint the nodes
    # unreachable after 50 s and evict their pods.
    leases = k8s_client.CoordinationV1Api(admin_api)

    def renew_times() -> dict[str, str]:
        items = call_json(leases.list_namespaced_lease, "kube-node-lease")["items"]
        return {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in items}

    first = renew_times()
    assert set(first) == {n.name for n in FAKE_NODES} | set(control_plane.process_nodes)
    wait_until(
        "every node Lease renewed",
        lambda: all(t > first[name] for name, t in renew_times().items()),
        timeout=NODE_LEASE_SECONDS,
        interval=1,
    )


def test_rbac_users_start_without_rights_until_a_rolebinding(
    namespace: str,
    admin_api: k8s_client.ApiClient,
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
) -> None:
    review = call_json(k8s_client.AuthenticationV1Api(alice_api).create_self_subject_review, {})
    assert review["status"]["userInfo"]["username"] == "alice"

    alice = k8s_client.CustomObjectsApi(alice_api)
    bob = k8s_client.CustomObjectsApi(bob_api)
    with pytest.raises(ApiException) as denied:
        call_json(alice.list_namespaced_custom_object, *RAY, namespace, "rayclusters")
    assert denied.value.status == HTTPStatus.FORBIDDEN
    message = json.loads(str(denied.value.body))["message"]
    assert 'User "alice" cannot list resource "rayclusters"' in message

    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    rule = {
        "apiGroups": ["ray.io"],
        "resources": ["rayclusters"],
        "verbs": ["get", "list"],
    }
    call_json(
        rbac.create_namespaced_role,
        namespace,
        {"metadata": {"name": "raycluster-reader"}, "rules": [rule]},
    )
    call_json(
        rbac.create_namespaced_role_binding,
        namespace,
        {
            "metadata": {"name": "alice-reads-rayclusters"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "raycluster-reader",
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": "alice",
                }
            ],
        },
    )
    # The RBAC authorizer learns of the binding through its informer: allow a moment.
    listed = wait_until(
        "alice may list rayclusters",
        lambda: call_json(alice.list_namespaced_custom_object, *RAY, namespace, "rayclusters"),
        timeout=30,
    )
    assert listed["items"] == []

    # Only what was granted, only where, only to whom.
    create = alice.create_namespaced_custom_object
    assert forbidden(create, *RAY, namespace, "rayclusters", kwok_raycluster("x"))
    assert forbidden(alice.list_namespaced_custom_object, *RAY, "default", "rayclusters")
    assert forbidden(bob.list_namespaced_custom_object, *RAY, namespace, "rayclusters")


def test_raycluster_runs_on_fake_gpu_nodes_and_is_garbage_collected(
    namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    custom = k8s_client.CustomObjectsApi(admin_api)
    create = custom.create_namespaced_custom_object
    call_json(create, *RAY, namespace, "rayclusters", kwok_raycluster("demo"))

    rc = wait_raycluster_ready(admin_api, namespace, "demo")
    assert rc["status"]["readyWorkerReplicas"] == 1
    assert rc["status"]["desiredGPU"] == "1"

    pods = {
        p["metadata"]["labels"]["ray.io/node-type"]: p
        for p in ray_pods(admin_api, namespace, "demo")
    }
    assert set(pods) == {"head", "worker"}
    for pod in pods.values():
        assert pod["status"]["phase"] == "Running"
        assert has_condition(pod, "Ready")
        assert pod["status"]["podIP"]
    # The head does not tolerate the GPU taint, so it lands on the CPU node.
    assert pods["head"]["spec"]["nodeName"] == "kwok-cpu-0"
    worker = pods["worker"]
    assert worker["spec"]["nodeName"] in A100_NODES
    assert worker["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE] == "1"

    call_json(custom.delete_namespaced_custom_object, *RAY, namespace, "rayclusters", "demo")
    # The pods are owned by the RayCluster: the controller-manager's garbage collector
    # deletes them, and KWOK finishes the deletion as a kubelet would.
    wait_until(
        "RayCluster pods garbage-collected",
        lambda: not ray_pods(admin_api, namespace, "demo"),
        timeout=90,
        interval=0.5,
    )


def test_gpu_request_no_node_can_satisfy_stays_pending_with_a_reason(
    namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    core = k8s_client.CoreV1Api(admin_api)
    too_many = {"limits": {GPU_RESOURCE: "16"}}
    pod = {
        "metadata": {"name": "greedy"},
        "spec": {
            "tolerations": [GPU_TOLERATION],
            "containers": [{"name": "main", "image": RAY_IMAGE, "resources": too_many}],
        },
    }
    call_json(core.create_namespaced_pod, namespace, pod)

    def unschedulable() -> dict[str, Any] | None:
        status = call_json(core.read_namespaced_pod, "greedy", namespace)["status"]
        for c in status.get("conditions") or []:
            if c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable":
                return dict(c, phase=status["phase"])
        return None

    condition = wait_until("pod marked Unschedulable", unschedulable, timeout=30)
    assert condition["phase"] == "Pending"
    assert f"Insufficient {GPU_RESOURCE}" in condition["message"]


def test_apiserver_outage_and_recovery(
    control_plane: ControlPlane, namespace: str, admin_api: k8s_client.ApiClient
) -> None:
    core = k8s_client.CoreV1Api(admin_api)
    control_plane.stop_apiserver()
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.list_node(_request_timeout=2)

    control_plane.start_apiserver()
    # The same client (same URL, CA and token) works again.
    nodes = len(FAKE_NODES) + len(control_plane.process_nodes)
    assert len(call_json(core.list_node)["items"]) == nodes
    # Controllers, scheduler, KWOK and the operator re-established their watches.
    custom = k8s_client.CustomObjectsApi(admin_api)
    create = custom.create_namespaced_custom_object
    call_json(create, *RAY, namespace, "rayclusters", kwok_raycluster("after", gpu_type="h100"))
    wait_raycluster_ready(admin_api, namespace, "after")
    worker = next(
        p
        for p in ray_pods(admin_api, namespace, "after")
        if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
    )
    assert worker["spec"]["nodeName"] == "kwok-h100-0"


def test_requests_of_ordinary_users_are_audited(control_plane: ControlPlane) -> None:
    """Benchmarks count a user's API requests on the server's side, from the audit log."""
    since = time.time() - 1
    api = k8s_client.CoreV1Api(control_plane.api_client("bob"))
    with pytest.raises(k8s_client.ApiException):
        api.list_namespaced_pod("default")  # forbidden, but still a request
    events = wait_until(
        "bob's request in the audit log",
        lambda: control_plane.audited_requests("bob", since=since),
        timeout=10,
    )
    assert [(e["verb"], e["objectRef"]["resource"]) for e in events] == [("list", "pods")]
