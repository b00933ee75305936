"""KubeRayBackend against the real API server and the real KubeRay operator, as alice.

alice's rights come from the Role in docs/kubernetes-rbac.md; the namespace enforces Pod
Security "restricted", so every pod the operator makes from raylab's manifest must pass it.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

import raylab.backends.kuberay.config as kuberay_config
from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import ENVIRONMENT_ANNOTATION as ANNOTATION
from raylab.backends.kuberay.portforward import Relay
from raylab.backends.kuberay.watch import Changed, Informer, Message, Synced
from raylab.errors import BackendUnavailable, Forbidden, NotFound
from raylab.identity import owner_label
from raylab.model import ClusterEnvironment, ClusterInfo, Phase
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

from .kuberay_support import (
    RAY,
    RESTRICTED,
    Recorder,
    grant,
    is_ready,
    new_namespace,
    ray_pods,
    settings,
    user_kubeconfig,
    wait_info,
)

SETTINGS = settings()


def spec(name: str, **fields: Any) -> ClusterSpec:
    return ClusterSpec.from_mapping({"name": name, "cpus": "1", "memory": "1Gi", **fields},
                                    SETTINGS.profiles)  # fmt: skip


@pytest.fixture(scope="module")
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-be", labels=RESTRICTED) as name:
        grant(admin_api, name, "alice")
        yield name


@pytest.fixture(scope="module")
def alice(alice_api: k8s_client.ApiClient, namespace: str) -> KubeRayBackend:
    return KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)


# --- where clusters go ---------------------------------------------------------------


def test_namespace_from_template_pod_kubeconfig_or_default(
    control_plane: ControlPlane,
    alice_api: k8s_client.ApiClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    per_user = settings(namespace_template="ray-{username}")
    backend = KubeRayBackend(per_user, api_client=alice_api, user="Alice@Example.com")
    assert backend.namespace == f"ray-{owner_label('Alice@Example.com')}"
    monkeypatch.setenv("JUPYTERHUB_USER", "bob")
    assert KubeRayBackend(per_user, api_client=alice_api).namespace == "ray-bob"
    assert KubeRayBackend(per_user, api_client=alice_api, namespace="x").namespace == "x"
    with pytest.raises(BackendUnavailable, match="namespace_template"):
        KubeRayBackend(settings(namespace_template="ray-{user}"), api_client=alice_api)

    # No template: the kubeconfig's context namespace, read from KUBECONFIG.
    monkeypatch.setattr(kuberay_config, "SA_DIR", tmp_path / "no-service-account")
    config = user_kubeconfig(control_plane.kubeconfig("alice"), "ctx-ns", tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", str(config))
    from_config = KubeRayBackend(SETTINGS)
    assert (from_config.namespace, from_config.server) == ("ctx-ns", control_plane.server_url)
    # In a pod, the pod's own namespace comes first.
    (tmp_path / "sa").mkdir()
    (tmp_path / "sa" / "namespace").write_text("pod-ns\n")
    monkeypatch.setattr(kuberay_config, "SA_DIR", tmp_path / "sa")
    assert KubeRayBackend(SETTINGS).namespace == "pod-ns"

    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))
    with pytest.raises(BackendUnavailable, match="no Kubernetes configuration") as err:
        KubeRayBackend(SETTINGS)
    assert "KUBECONFIG" in str(err.value.detail)


# --- lifecycle -------------------------------------------------------------------------


def test_autoscaling_cluster_passes_pod_security_and_scales(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    s = spec("auto", gpus=2, workers=1, min_workers=0, max_workers=2, idle_timeout_minutes=3)
    created = alice.create(s, "alice")
    assert created.phase == Phase.PENDING
    assert created.owner == "alice"
    ready = wait_info(alice, "auto", is_ready, "Ready")
    assert (ready.workers_ready, ready.gpus, ready.head_ready) == (1, 2, True)
    assert ready.endpoints.client == f"ray://auto-head-svc.{namespace}.svc:10001"
    head = next(p for p in ray_pods(admin_api, namespace, "auto")
                if p["metadata"]["labels"]["ray.io/node-type"] == "head")  # fmt: skip
    # KubeRay added its autoscaler beside Ray; restricted Pod Security admitted both.
    assert [c["name"] for c in head["spec"]["containers"]] == ["ray-head", "autoscaler"]

    scaled = alice.scale("auto", 3)  # beyond max: the range widens, or the autoscaler undoes it
    assert (scaled.workers_desired, scaled.spec.max_workers, scaled.spec.gpus) == (3, 3, 6)
    obj = call_json(k8s_client.CustomObjectsApi(admin_api).get_namespaced_custom_object,
                    *RAY, namespace, "rayclusters", "auto")  # fmt: skip
    group = obj["spec"]["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (3, 0, 3)
    wait_info(alice, "auto", lambda i: is_ready(i) and i.workers_ready == 3, "3 workers")
    alice.delete("auto", propagation="Background")
    wait_until("auto gone", lambda: alice.get("auto") is None, timeout=30)


def test_the_environment_is_kept_on_the_raycluster_without_values(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    """What every kernel's connect, the sidebar and the export read back (names only)."""
    env = ClusterEnvironment(working_dir="/home/alice/nb", working_dir_bytes=3 << 20,
                             pip=("numpy>=2",), env_names=("HF_TOKEN",))  # fmt: skip
    created = alice.create(spec("envc", gpus=0, gpu_type="cpu", workers=0), "alice", env)
    assert created.environment == env
    changed = env.with_changes(pip=("numpy>=2", "torch==2.5"), working_dir=None)
    assert alice.set_environment("envc", changed).environment == changed
    assert alice.get("envc").environment == changed  # type: ignore[union-attr]
    obj = call_json(k8s_client.CustomObjectsApi(admin_api).get_namespaced_custom_object,
                    *RAY, namespace, "rayclusters", "envc")  # fmt: skip
    assert ClusterEnvironment.from_annotation(obj["metadata"]["annotations"][ANNOTATION]) == (
        changed
    )
    alice.delete("envc", propagation="Background")
    wait_until("envc gone", lambda: alice.get("envc") is None, timeout=30)


def test_deleting_shows_until_the_object_is_gone(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    alice.create(spec("gone", workers=1), "alice")
    wait_info(alice, "gone", is_ready, "Ready")
    custom = k8s_client.CustomObjectsApi(admin_api)
    hold = {"metadata": {"finalizers": ["raylab.test/hold"]}}
    call_json(custom.patch_namespaced_custom_object, *RAY, namespace, "rayclusters", "gone", hold)
    alice.delete("gone")
    info = wait_info(alice, "gone", lambda i: i.phase == Phase.DELETING, "Deleting")
    assert info.reason == "deleting its pods and services"
    assert [c.phase for c in alice.clusters("alice")] == [Phase.DELETING]
    release = {"metadata": {"finalizers": None}}
    call_json(custom.patch_namespaced_custom_object, *RAY, namespace, "rayclusters", "gone",
              release)  # fmt: skip
    wait_until("gone gone", lambda: alice.get("gone") is None, timeout=60)
    # Foreground deletion removes the pods first, but the operator can recreate one it
    # sees missing before its cache has the deletion (a race under load): then the
    # garbage collector removes that one once the object is gone.
    wait_until("its pods gone", lambda: ray_pods(admin_api, namespace, "gone") == [], 60)


def test_replica_failure_is_failed_with_the_reason(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> None:
    with new_namespace(admin_api, "rl-quota") as namespace:
        grant(admin_api, namespace, "alice")
        core = k8s_client.CoreV1Api(admin_api)
        quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
        call_json(core.create_namespaced_resource_quota, namespace, quota)
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)
        backend.create(spec("starved", workers=1), "alice")
        info = wait_info(backend, "starved", lambda i: i.phase == Phase.FAILED, "Failed")
        assert info.reason.startswith("FailedCreateHeadPod"), info.reason
        assert "exceeded quota: no-pods" in info.reason
        assert backend.logs("starved") == (
            "starved has no head pod yet (phase Failed): no log to show.\n"
        )


def test_logs_say_why_the_node_cannot_serve_them(alice: KubeRayBackend) -> None:
    alice.create(spec("talk", workers=0), "alice")
    wait_info(alice, "talk", is_ready, "Ready")
    # KWOK's fake nodes run no kubelet that serves logs: the API server's refusal is
    # reported with the pod's name, as a real unreachable node would be.
    with pytest.raises(BackendUnavailable, match=r"cannot read the log of head pod talk-head-"):
        alice.logs("talk")
    with pytest.raises(NotFound):
        alice.logs("nothere")
    alice.delete("talk", propagation="Background")


# --- watch -----------------------------------------------------------------------------


def test_watch_yields_added_modified_deleted_and_scheduling_reasons(
    alice: KubeRayBackend,
) -> None:
    alice.create(spec("before", workers=0), "alice")
    recorder = Recorder(alice)
    try:
        recorder.wait("before", "ADDED")
        alice.create(spec("w1", workers=1), "alice")
        recorder.wait("w1", "ADDED")
        recorder.wait("w1", "MODIFIED", Phase.READY)
        # 8 H100s per worker, and the only H100 node has 4: the scheduler's reason comes
        # from the pod, while the RayCluster object itself does not change.
        alice.create(spec("w2", gpus=8, gpu_type="h100", workers=1), "alice")
        recorder.wait("w2", "MODIFIED", Phase.PENDING, "Insufficient nvidia.com/gpu")
        for name in ("before", "w1", "w2"):
            alice.delete(name, propagation="Background")
            recorder.wait(name, "DELETED")
        phases = [e.cluster.phase for e in recorder.events if e.cluster.name == "w1"]
        assert phases[0] in (Phase.PENDING, Phase.STARTING)
        assert Phase.READY in phases
    finally:
        recorder.close()


def test_a_resource_version_the_server_forgot_means_listing_again(
    alice: KubeRayBackend, namespace: str
) -> None:
    """410 Gone on resume (after an outage longer than the server's watch history)."""
    inbox: queue.Queue[Message] = queue.Queue()

    def list_call(**kwargs: Any) -> Any:
        return alice.custom.list_namespaced_custom_object(*RAY, namespace, "rayclusters", **kwargs)

    informer = Informer("rayclusters", list_call, inbox, resource_version="1")
    informer.start()
    try:
        first = inbox.get(timeout=30)
        assert isinstance(first, Synced)  # listed afresh instead of failing or going quiet
        alice.create(spec("relisted", workers=0), "alice")
        changed = inbox.get(timeout=30)
        assert isinstance(changed, Changed)
        assert (changed.type, changed.obj["metadata"]["name"]) == ("ADDED", "relisted")
    finally:
        informer.close()
        informer.join(timeout=5)
        alice.delete("relisted", propagation="Background")
    assert not informer.is_alive()


# --- who sees what ---------------------------------------------------------------------


def test_in_a_shared_namespace_users_see_only_their_own_clusters(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient, namespace: str,
) -> None:  # fmt: skip
    grant(admin_api, namespace, "bob")
    bob_backend = KubeRayBackend(SETTINGS, api_client=bob_api, namespace=namespace)
    bob = ClusterService(bob_backend, SETTINGS, "bob")
    alice = ClusterService(
        KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace), SETTINGS, "alice"
    )
    bob.create({"name": "bobs", "workers": 0, "cpus": "1", "memory": "1Gi"})
    alice.create({"name": "alices", "workers": 0, "cpus": "1", "memory": "1Gi"})
    assert [c.name for c in alice.list()] == ["alices"]
    assert [c.name for c in bob.list()] == ["bobs"]
    for attempt in (alice.get, alice.delete, alice.logs):
        with pytest.raises(NotFound, match="no cluster named 'bobs'"):
            attempt("bobs")
    with pytest.raises(NotFound):
        alice.scale("bobs", 2)
    assert bob.get("bobs").owner == "bob"  # untouched
    admin = ClusterService(bob_backend, SETTINGS, "root", admin=True)
    assert [c.name for c in admin.list(everyone=True)] == ["alices", "bobs"]
    for service, name in ((alice, "alices"), (bob, "bobs")):
        service.delete(name)


def test_with_a_namespace_per_user_rbac_keeps_users_apart(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
) -> None:  # fmt: skip
    with new_namespace(admin_api, "rl-tpl") as prefix:
        per_user = settings(namespace_template=prefix + "-{username}")
        spaces = {}
        for user in ("alice", "bob"):
            name = f"{prefix}-{user}"
            call_json(k8s_client.CoreV1Api(admin_api).create_namespace,
                      {"metadata": {"name": name}})  # fmt: skip
            spaces[user] = name
        try:
            for user in ("alice", "bob"):
                grant(admin_api, spaces[user], user)
            bob_backend = KubeRayBackend(per_user, api_client=bob_api, user="bob")
            assert bob_backend.namespace == spaces["bob"]
            bob = ClusterService(bob_backend, per_user, "bob")
            bob.create({"name": "bobs", "workers": 0, "cpus": "1", "memory": "1Gi"})
            alice_backend = KubeRayBackend(per_user, api_client=alice_api, user="alice")
            alice = ClusterService(alice_backend, per_user, "alice")
            assert alice.list() == []
            with pytest.raises(NotFound, match="no cluster named 'bobs'"):
                alice.get("bobs")
            # Going to bob's namespace directly: Kubernetes itself refuses, and says how.
            trespass = KubeRayBackend(per_user, api_client=alice_api, namespace=spaces["bob"])
            with pytest.raises(Forbidden) as denied:
                trespass.clusters()
            assert str(denied.value) == (
                "Kubernetes does not allow you to list rayclusters.ray.io in namespace "
                f"{spaces['bob']!r}"
            )
            assert "docs/kubernetes-rbac.md" in str(denied.value.detail)
            with pytest.raises(Forbidden, match=r"delete rayclusters\.ray\.io"):
                trespass.delete("bobs")
            assert bob.get("bobs").phase != Phase.DELETING
        finally:
            for name in spaces.values():
                call_json(k8s_client.CoreV1Api(admin_api).delete_namespace, name,
                          propagation_policy="Background")  # fmt: skip


# --- connecting ------------------------------------------------------------------------


def test_client_address_in_a_pod_is_the_head_service(
    alice: KubeRayBackend, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = ClusterInfo(name="c", owner="alice", backend="kuberay", phase=Phase.READY,
                       spec=spec("c"))  # fmt: skip
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
    assert alice.client_address(info) == f"ray://c-head-svc.{namespace}.svc:10001"
    assert alice.dashboard_address(info) == f"http://c-head-svc.{namespace}.svc:8265"


def test_client_address_outside_forwards_through_the_api_server(
    alice: KubeRayBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    alice.create(spec("fwd", workers=0), "alice")
    try:
        # Before the head runs: no head pod; once KWOK started it (it can be that fast):
        # the API server cannot reach the fake kubelet. Either way, one clear message.
        with pytest.raises(
            BackendUnavailable, match=r"no running head pod|cannot port-forward to cluster 'fwd'"
        ):
            alice.port_forward("fwd", 10001)
        info = wait_info(alice, "fwd", is_ready, "Ready")
        # The API server accepts the port-forward (RBAC allows it) and then cannot reach
        # the fake node's kubelet: the user is told so, at once, naming the cluster.
        with pytest.raises(BackendUnavailable, match=r"cannot port-forward to cluster 'fwd'"):
            alice.client_address(info)
    finally:
        alice.delete("fwd", propagation="Background")


def test_relay_carries_bytes_both_ways_per_connection() -> None:
    """The local end of a port-forward, with a plain TCP echo server as the far end."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    stop = threading.Event()

    def echo() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:  # closed at the end of the test
                return
            with conn:
                while data := conn.recv(65536):
                    conn.sendall(data)

    echoer = threading.Thread(target=echo, daemon=True)
    echoer.start()
    opened: list[float] = []

    def open_remote() -> socket.socket:
        opened.append(time.time())
        return socket.create_connection(("127.0.0.1", port))

    relay = Relay(open_remote)
    try:
        payload = bytes(range(256)) * 4096  # 1 MiB: several chunks each way
        for _ in range(2):
            with socket.create_connection((relay.host, relay.port)) as client:
                client.sendall(payload)
                client.shutdown(socket.SHUT_WR)
                received = b""
                while chunk := client.recv(65536):
                    received += chunk
                    if len(received) == len(payload):
                        break
            assert received == payload
        assert len(opened) == 2  # one remote connection per local one
    finally:
        relay.close()
        stop.set()
        echoer.join(timeout=2)
        server.close()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((relay.host, relay.port), timeout=1)
