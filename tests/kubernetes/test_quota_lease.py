"""The quota check and the create are one step per user on KubeRay: a Lease per user in
the namespace (raylab/backends/kuberay/quota_lock.py), on the real API server.

Each concurrent caller has its own ClusterService, KubeRayBackend and API client, as
separate processes (the Jupyter server, a CLI, kernels) would; one test also sends real
`POST raylab/clusters` to a real server process at the same moment.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.quota_lock import lease_name
from raylab.errors import BackendUnavailable, Forbidden, QuotaExceeded
from raylab.service import ClusterService

from .kuberay_support import RAY, grant, new_namespace, settings
from .server_process import raylab_server

ONE_CLUSTER = settings(max_clusters_per_user=1)
SMALL = {"gpus": 0, "workers": 0, "cpus": "1", "memory": "1Gi"}


@pytest.fixture
def alices_namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-lease") as namespace:
        grant(admin_api, namespace, "alice")
        yield namespace


def rayclusters(admin_api: k8s_client.ApiClient, namespace: str) -> list[str]:
    custom = k8s_client.CustomObjectsApi(admin_api)
    items = call_json(custom.list_namespaced_custom_object, *RAY, namespace, "rayclusters")
    return sorted(o["metadata"]["name"] for o in items["items"])


def at_once(calls: list[Callable[[], object]]) -> list[object]:
    """Run `calls` in threads released together; each one's result or exception."""
    results: list[object] = [None] * len(calls)
    start = threading.Barrier(len(calls))

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = calls[i]()
        except Exception as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=180)
    return results


def creator(control_plane: ControlPlane, namespace: str, name: str) -> Callable[[], object]:
    """A create as its own process would make it: its own client, backend and service."""

    def create() -> object:
        with control_plane.api_client("alice") as api:
            backend = KubeRayBackend(ONE_CLUSTER, api_client=api, namespace=namespace)
            return ClusterService(backend, ONE_CLUSTER, "alice").create({"name": name, **SMALL})

    return create


def test_six_creates_at_once_against_a_quota_of_one_make_one_cluster(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient, alices_namespace: str
) -> None:
    calls = [creator(control_plane, alices_namespace, f"c{i}") for i in range(6)]
    results = at_once(calls)
    refused = [r for r in results if isinstance(r, QuotaExceeded)]
    made = [r for r in results if isinstance(r, tuple)]
    assert (len(made), len(refused)) == (1, 5), results
    assert all(str(r) == "you have 1 clusters, the limit is 1" for r in refused)
    assert rayclusters(admin_api, alices_namespace) == [made[0][0].name]
    # Released: nothing left behind in the namespace.
    leases = k8s_client.CoordinationV1Api(admin_api)
    assert call_json(leases.list_namespaced_lease, alices_namespace)["items"] == []


def test_posts_to_a_server_and_creates_elsewhere_at_once_make_one_cluster(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient, tmp_path: Path
) -> None:
    """Three `POST raylab/clusters` to alice's Jupyter server (its own process) and three
    creates in this process (as kernels or CLIs), released together."""
    options = ["--Raylab.max_clusters_per_user=1"]
    with raylab_server(control_plane, tmp_path, "rl-lease-srv", options) as (server, ns):
        assert server.get("api/me")["identity"]["username"] == "alice"

        def post(name: str) -> Callable[[], object]:
            return lambda: server.post("raylab/clusters", {"name": name, **SMALL})

        posts = [post(f"web{i}") for i in range(3)]
        here = [creator(control_plane, ns, f"cli{i}") for i in range(3)]
        results = at_once([*posts, *here])
        names = rayclusters(admin_api, ns)
        log = server.log_tail()
    answers = [(r[0], r[1].get("code")) for r in results[:3] if isinstance(r, tuple)]
    made_here = [r for r in results[3:] if isinstance(r, tuple)]
    refused_here = [r for r in results[3:] if isinstance(r, QuotaExceeded)]
    assert answers.count((201, None)) + len(made_here) == 1, (results, log)
    assert answers.count((403, "quota")) + len(refused_here) == 5, (results, log)
    assert len(names) == 1, names


def dead_lease(admin_api: k8s_client.ApiClient, namespace: str, seconds: int) -> None:
    """alice's quota Lease as a holder leaves it that was killed while holding it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "metadata": {"name": lease_name("alice")},
        "spec": {"holderIdentity": "killed-kernel", "leaseDurationSeconds": seconds,
                 "acquireTime": now, "renewTime": now},
    }  # fmt: skip
    call_json(k8s_client.CoordinationV1Api(admin_api).create_namespaced_lease, namespace, body)


def lease(admin_api: k8s_client.ApiClient, namespace: str) -> dict[str, Any] | None:
    try:
        found: dict[str, Any] = call_json(
            k8s_client.CoordinationV1Api(admin_api).read_namespaced_lease,
            lease_name("alice"),
            namespace,
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return found


def test_a_lease_left_by_a_dead_holder_is_taken_over_once_it_expires(
    alice_api: k8s_client.ApiClient, admin_api: k8s_client.ApiClient, alices_namespace: str
) -> None:
    dead_lease(admin_api, alices_namespace, seconds=3)
    backend = KubeRayBackend(ONE_CLUSTER, api_client=alice_api, namespace=alices_namespace)
    alice = ClusterService(backend, ONE_CLUSTER, "alice")
    # Waiting less than it lasts: refused, saying who holds it.
    backend.quota_wait_s = 1.0
    with pytest.raises(BackendUnavailable) as err:
        alice.create({"name": "first", **SMALL})
    assert "still held Lease" in err.value.message
    assert "killed-kernel" in err.value.message
    assert rayclusters(admin_api, alices_namespace) == []
    # Waiting longer: taken over once unrenewed for its 3 s, then released.
    backend.quota_wait_s = 30.0
    info, created = alice.create({"name": "first", **SMALL})
    assert (info.name, created) == ("first", True)
    assert lease(admin_api, alices_namespace) is None
    assert rayclusters(admin_api, alices_namespace) == ["first"]


def test_a_live_holder_keeps_its_lease_past_its_duration(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient, alices_namespace: str
) -> None:
    """A slow holder renews: a waiter never takes the Lease from it."""
    with control_plane.api_client("alice") as mine, control_plane.api_client("alice") as theirs:
        holder = KubeRayBackend(ONE_CLUSTER, api_client=mine, namespace=alices_namespace)
        holder.quota_lease_s = 3
        other = KubeRayBackend(ONE_CLUSTER, api_client=theirs, namespace=alices_namespace)
        other.quota_wait_s = 7.0  # over twice the Lease's duration
        waiter = ClusterService(other, ONE_CLUSTER, "alice")
        with holder.quota_lock("alice"):
            held = lease(admin_api, alices_namespace)
            assert held is not None
            assert held["spec"]["leaseDurationSeconds"] == 3
            with pytest.raises(BackendUnavailable, match="still held Lease"):
                waiter.create({"name": "meanwhile", **SMALL})
            assert rayclusters(admin_api, alices_namespace) == []
            renewed = lease(admin_api, alices_namespace)
            assert renewed is not None
            assert renewed["spec"]["holderIdentity"] == held["spec"]["holderIdentity"]
            assert renewed["spec"]["renewTime"] > held["spec"]["renewTime"]
        assert lease(admin_api, alices_namespace) is None
        waiter.create({"name": "after", **SMALL})
    assert rayclusters(admin_api, alices_namespace) == ["after"]


def test_a_role_without_leases_is_told_which_rule_to_add(
    alice_api: k8s_client.ApiClient, admin_api: k8s_client.ApiClient
) -> None:
    with new_namespace(admin_api, "rl-nolease") as namespace:
        grant(admin_api, namespace, "alice", without="leases")
        backend = KubeRayBackend(ONE_CLUSTER, api_client=alice_api, namespace=namespace)
        alice = ClusterService(backend, ONE_CLUSTER, "alice")
        with pytest.raises(Forbidden) as err:
            alice.create({"name": "nope", **SMALL})
        assert rayclusters(admin_api, namespace) == []
    assert err.value.message == (
        "Kubernetes does not allow you to create leases.coordination.k8s.io in namespace "
        f"{namespace!r}"
    )
    detail = str(err.value.detail)
    assert "docs/kubernetes-rbac.md" in detail
    assert (
        'apiGroups: ["coordination.k8s.io"], resources: ["leases"], '
        'verbs: ["get", "create", "update", "delete"]' in detail
    )
