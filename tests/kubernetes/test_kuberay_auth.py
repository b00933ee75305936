"""A KubeRay cluster's token Secret and NetworkPolicies, on the real control plane.

alice works with the documented Role in her namespace; bob has the same Role in his
own. The real operator makes the pods (KWOK runs none of their processes), so what is
checked here is what each Ray container would start with, and what Kubernetes stores.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from controlplane import call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

import raylab.backends.kuberay.security as kuberay_security
from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import cluster_labels
from raylab.backends.kuberay.manifest_security import network_policies, peer
from raylab.errors import Conflict, Forbidden
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

from .kuberay_support import RAY, RESTRICTED, grant, new_namespace, ray_pods, settings

SETTINGS = settings(notebook_namespace="jhub", operator_namespace="kuberay-system")


def spec(name: str, **fields: Any) -> ClusterSpec:
    return ClusterSpec.from_mapping({"name": name, "cpus": "1", "memory": "1Gi", **fields},
                                    SETTINGS.profiles)  # fmt: skip


@pytest.fixture(scope="module")
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-auth", labels=RESTRICTED) as name:
        grant(admin_api, name, "alice")
        yield name


@pytest.fixture(scope="module")
def bobs_namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-bob") as name:
        grant(admin_api, name, "bob")
        yield name


@pytest.fixture(scope="module")
def alice(alice_api: k8s_client.ApiClient, namespace: str) -> KubeRayBackend:
    return KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)


@pytest.fixture(scope="module")
def cluster(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> Iterator[str]:
    """An autoscaling GPU cluster: head, autoscaler, a worker and its init container."""
    alice.create(spec("tok", gpus=2, workers=1, min_workers=1, max_workers=2), "alice")
    try:
        pods = lambda: len(ray_pods(admin_api, namespace, "tok")) == 2  # noqa: E731
        wait_until("the head and a worker pod", pods, timeout=60)
        yield "tok"
    finally:
        alice.delete("tok", propagation="Background")


def secret(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = call_json(
        k8s_client.CoreV1Api(api).read_namespaced_secret, f"{name}-ray-token", namespace
    )
    return body


def raycluster(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = k8s_client.CustomObjectsApi(api)
    body: dict[str, Any] = call_json(
        custom.get_namespaced_custom_object, *RAY, namespace, "rayclusters", name
    )
    return body


def policies(api: k8s_client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    net = k8s_client.NetworkingV1Api(api)
    items = call_json(net.list_namespaced_network_policy, namespace)["items"]
    return {p["metadata"]["name"]: p for p in items}


def created(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"])


def test_the_secret_is_the_clusters_and_exists_before_its_pods(
    cluster: str, admin_api: k8s_client.ApiClient, alice: KubeRayBackend, namespace: str
) -> None:
    body = secret(admin_api, namespace, cluster)
    owner = raycluster(admin_api, namespace, cluster)
    assert body["metadata"]["ownerReferences"] == [
        {"apiVersion": "ray.io/v1", "kind": "RayCluster", "name": cluster,
         "uid": owner["metadata"]["uid"]}
    ]  # fmt: skip
    token = base64.b64decode(body["data"]["auth_token"]).decode()
    assert len(token) == 64
    assert alice.auth_token(cluster) == token
    assert owner["metadata"]["annotations"]["raylab.io/ray-auth"] == "token"
    assert token not in str(owner)  # the RayCluster names the Secret, never holds the token
    for pod in ray_pods(admin_api, namespace, cluster):
        assert created(body) <= created(pod)


def test_every_ray_container_reads_the_token_from_the_secret(
    cluster: str, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    wanted = [
        {"name": "RAY_AUTH_MODE", "value": "token"},
        {"name": "RAY_AUTH_TOKEN",
         "valueFrom": {"secretKeyRef": {"name": f"{cluster}-ray-token", "key": "auth_token"}}},
    ]  # fmt: skip
    seen = []
    for pod in ray_pods(admin_api, namespace, cluster):
        spec_ = pod["spec"]
        for container in spec_.get("initContainers", []) + spec_["containers"]:
            env = [e for e in container.get("env", []) if e["name"].startswith("RAY_AUTH")]
            assert env == wanted, container["name"]
            seen.append(container["name"])
    assert sorted(seen) == ["autoscaler", "ray-head", "ray-worker", "wait-gcs-ready"]


def test_network_policies_fence_the_head_and_the_workers(
    cluster: str, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    found = policies(admin_api, namespace)
    owner_uid = raycluster(admin_api, namespace, cluster)["metadata"]["uid"]
    expected = network_policies(
        cluster,
        namespace,
        cluster_labels("alice", "a100"),
        clients=[peer({"component": "singleuser-server", "hub.jupyter.org/username": "alice"},
                      "jhub")],
        operator=peer({"app.kubernetes.io/name": "kuberay-operator"}, "kuberay-system"),
        monitoring=peer({}, "monitoring"),
    )  # fmt: skip
    for policy in expected:
        stored = found[policy["metadata"]["name"]]
        assert stored["metadata"]["ownerReferences"][0]["uid"] == owner_uid
        # Stored exactly as sent: strict validation let nothing be dropped on the way.
        assert stored["spec"] == policy["spec"]
    head = found[f"{cluster}-ray-head"]["spec"]
    assert head["podSelector"]["matchLabels"] == {"ray.io/cluster": cluster,
                                                   "ray.io/node-type": "head"}  # fmt: skip
    client_rule = head["ingress"][1]
    assert {p["port"] for p in client_rule["ports"]} == {10001, 8265}
    workers = found[f"{cluster}-ray-workers"]["spec"]["ingress"]
    assert workers[0] == {"from": [{"podSelector": {"matchLabels": {"ray.io/cluster": cluster}}}]}
    # A direct driver (the notebook pod joined as a node): the GCS and, on every node,
    # the fixed node and object manager ports and Ray's worker range. Not the operator.
    driver = [{"port": 8076, "protocol": "TCP"}, {"port": 8077, "protocol": "TCP"},
              {"port": 10002, "endPort": 19999, "protocol": "TCP"}]  # fmt: skip
    notebook = [peer({"component": "singleuser-server", "hub.jupyter.org/username": "alice"},
                     "jhub")]  # fmt: skip
    gcs = {"port": 6379, "protocol": "TCP"}
    assert head["ingress"][2] == {"from": notebook, "ports": [gcs, *driver]}
    assert workers[1]["from"] == notebook
    assert workers[1]["ports"] == driver


def test_bob_cannot_read_alices_secret(
    cluster: str, bob_api: k8s_client.ApiClient, bobs_namespace: str, namespace: str
) -> None:
    with pytest.raises(ApiException) as err:
        secret(bob_api, namespace, cluster)
    assert err.value.status == 403
    # Through raylab, bob's own service in his namespace does not know the cluster at all.
    bob = ClusterService(
        KubeRayBackend(SETTINGS, api_client=bob_api, namespace=bobs_namespace), SETTINGS, "bob"
    )
    with pytest.raises(Exception, match="no cluster named 'tok'"):
        bob.auth_token(cluster)


def test_deleting_the_cluster_deletes_its_secret_and_policies(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    alice.create(spec("short", workers=0), "alice")
    assert secret(admin_api, namespace, "short")
    alice.delete("short", propagation="Background")

    def gone() -> bool:
        try:
            secret(admin_api, namespace, "short")
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_until("the Secret gone with its cluster", gone, timeout=60)
    wait_until(
        "the policies gone with their cluster",
        lambda: not [n for n in policies(admin_api, namespace) if n.startswith("short-")],
        timeout=60,
    )


def test_a_create_that_fails_half_way_leaves_nothing(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> None:
    with new_namespace(admin_api, "rl-half") as ns:
        # A Role that may make Secrets and policies but not RayClusters.
        grant(admin_api, ns, "alice", without="rayclusters")
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=ns)
        with pytest.raises(Forbidden, match=r"create rayclusters\.ray\.io"):
            backend.create(spec("half", workers=0), "alice")
        core = k8s_client.CoreV1Api(admin_api)
        names = [s["metadata"]["name"] for s in call_json(core.list_namespaced_secret, ns)["items"]]
        assert "half-ray-token" not in names
        assert policies(admin_api, ns) == {}


def test_a_role_without_secrets_is_named(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> None:
    with new_namespace(admin_api, "rl-nosec") as ns:
        grant(admin_api, ns, "alice", without="secrets")
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=ns)
        with pytest.raises(Forbidden) as err:
            backend.create(spec("nosec", workers=0), "alice")
        assert str(err.value) == (
            f"Kubernetes does not allow you to create secrets in namespace {ns!r}"
        )
        assert "docs/kubernetes-rbac.md" in str(err.value.detail)
        assert backend.clusters() == []


def test_a_leftover_secret_is_replaced_and_a_live_one_is_a_conflict(
    alice: KubeRayBackend,
    admin_api: k8s_client.ApiClient,
    namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = k8s_client.CoreV1Api(admin_api)
    leftover = {"metadata": {"name": "left-ray-token"}, "data": {"auth_token": "b2xk"}}
    call_json(core.create_namespaced_secret, namespace, leftover)
    with pytest.raises(Conflict, match="a cluster named 'left' already exists"):
        alice.create(spec("left", workers=0), "alice")  # too young to be a leftover
    assert alice.get("left") is None
    monkeypatch.setattr(kuberay_security, "LEFTOVER_AGE_S", 0.0)
    try:
        alice.create(spec("left", workers=0), "alice")
        assert alice.auth_token("left") != "old"
        assert secret(admin_api, namespace, "left")["metadata"]["ownerReferences"]
    finally:
        alice.delete("left", propagation="Background")
