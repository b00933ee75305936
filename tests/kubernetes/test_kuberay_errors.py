"""Every failure a user can act on, produced for real: API server down, KubeRay missing,
RBAC refusals, bad credentials, a taken name, the operator's validation warning."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import raycluster_manifest
from raylab.errors import BackendUnavailable, Conflict, Forbidden
from raylab.model import Phase
from raylab.spec import ClusterSpec

from .kuberay_support import (
    RAY,
    ROOT,
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
NOT_INSTALLED = "KubeRay is not installed in the Kubernetes cluster at {server} (namespace {ns}): "
NOT_INSTALLED += "no ray.io/v1 RayCluster API"


def spec(name: str, **fields: Any) -> ClusterSpec:
    fields = {"name": name, "workers": 0, "cpus": "1", "memory": "1Gi", **fields}
    return ClusterSpec.from_mapping(fields, SETTINGS.profiles)


@pytest.fixture(scope="module")
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-err") as name:
        grant(admin_api, name, "alice")
        yield name


@pytest.fixture(scope="module")
def alice(alice_api: k8s_client.ApiClient, namespace: str) -> KubeRayBackend:
    return KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)


def cli(kubeconfig: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m raylab.cli ...` as alice would run it on a laptop."""
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "JUPYTERHUB_USER": "alice"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-m", "raylab.cli", *args, "--backend", "kuberay"],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_api_server_down_then_back_without_restarting_raylab(
    control_plane: ControlPlane, alice: KubeRayBackend
) -> None:
    alice.create(spec("steady"), "alice")
    wait_info(alice, "steady", is_ready, "Ready")
    recorder = Recorder(alice)
    try:
        recorder.wait("steady", "ADDED", Phase.READY)
        control_plane.stop_apiserver()
        try:
            with pytest.raises(BackendUnavailable) as down:
                alice.clusters()
            assert str(down.value) == (
                f"cannot reach Kubernetes at {control_plane.server_url}: Connection refused"
            )
            assert "KUBECONFIG" in str(down.value.detail)
            with pytest.raises(BackendUnavailable, match="cannot reach Kubernetes"):
                alice.create(spec("during"), "alice")
            # The watch goes on, and says what is wrong meanwhile.
            wait_until("the watch reports the outage", lambda: recorder.health, 30, 0.1)
            assert str(recorder.health[0]).startswith(
                f"cannot reach Kubernetes at {control_plane.server_url}: "
            )
        finally:
            control_plane.start_apiserver()
        # The same backend object (and the same watch) carry on.
        assert [c.name for c in alice.clusters("alice")] == ["steady"]
        alice.create(spec("after"), "alice")
        recorder.wait("after", "ADDED")
        recorder.wait("after", "MODIFIED", Phase.READY)
        alice.delete("after", propagation="Background")
        recorder.wait("after", "DELETED")
        assert recorder.health[-1] is None  # and says when it is back
    finally:
        recorder.close()
        alice.delete("steady", propagation="Background")


def test_kuberay_not_installed(
    control_plane: ControlPlane,
    alice: KubeRayBackend,
    admin_api: k8s_client.ApiClient,
    namespace: str,
    tmp_path: Path,
) -> None:
    message = NOT_INSTALLED.format(server=control_plane.server_url, ns=namespace)
    kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace, tmp_path / "kc")
    control_plane.uninstall_crds()
    try:
        for attempt in (
            alice.clusters,
            lambda: alice.get("any"),
            lambda: alice.create(spec("any"), "alice"),
            lambda: next(alice.watch(Recorder.never())),
        ):
            with pytest.raises(BackendUnavailable) as missing:
                attempt()
            assert str(missing.value) == message
            assert "install the KubeRay operator" in str(missing.value.detail)
        shown = cli(kubeconfig, "list")
        assert shown.returncode == 1
        assert shown.stderr.splitlines()[0] == f"raylab: {message}"
    finally:
        control_plane.install_crds()
        restore_kuberay(admin_api, namespace)


def restore_kuberay(admin_api: k8s_client.ApiClient, namespace: str) -> None:
    """Wait until the operator and the garbage collector handle RayClusters again.

    Both lost their RayCluster watches with the CRD; other tests share this control
    plane, so this one leaves it as it found it.
    """
    custom = k8s_client.CustomObjectsApi(admin_api)
    body = raycluster_manifest(spec("probe"), SETTINGS.profiles.gpu_types["cpu"],
                               owner="admin", namespace=namespace, image="rayproject/ray:2.60.0",
                               ray_version="2.60.0")  # fmt: skip

    def reconciled() -> bool:
        try:
            call_json(custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", body)
        except k8s_client.ApiException as exc:
            if exc.status != 409:
                raise
        return bool(ray_pods(admin_api, namespace, "probe"))

    wait_until("the operator reconciles RayClusters again", reconciled, timeout=120, interval=1)

    def collected() -> bool:
        try:
            call_json(custom.delete_namespaced_custom_object, *RAY, namespace, "rayclusters",
                      "probe", propagation_policy="Foreground")  # fmt: skip
        except k8s_client.ApiException as exc:
            if exc.status != 404:
                raise
        return not ray_pods(admin_api, namespace, "probe")

    wait_until("the garbage collector handles RayClusters again", collected, 120, 1)


def test_forbidden_names_verb_resource_namespace_and_the_doc(
    bob_api: k8s_client.ApiClient, namespace: str
) -> None:
    bob = KubeRayBackend(SETTINGS, api_client=bob_api, namespace=namespace)
    for attempt, verb, what in (
        (bob.clusters, "list", "rayclusters.ray.io"),
        (lambda: bob.get("x"), "get", "rayclusters.ray.io"),
        # A create first makes the cluster's token Secret, so that is what is refused.
        (lambda: bob.create(spec("x"), "bob"), "create", "secrets"),
        (lambda: next(bob.watch(Recorder.never())), "list", "rayclusters.ray.io"),
    ):
        with pytest.raises(Forbidden) as denied:
            attempt()
        assert str(denied.value) == (
            f"Kubernetes does not allow you to {verb} {what} in namespace {namespace!r}"
        )
        detail = str(denied.value.detail)
        assert detail.startswith("ask your admin to grant the Role in docs/kubernetes-rbac.md")
        assert 'User "bob" cannot' in detail


def test_rejected_credentials(
    control_plane: ControlPlane, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = yaml.safe_load(control_plane.kubeconfig("alice").read_text())
    config["users"][0]["user"]["token"] = "not-a-token"
    path = tmp_path / "stale"
    path.write_text(yaml.safe_dump(config))
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(Forbidden, match="did not accept your credentials") as err:
        KubeRayBackend(SETTINGS, namespace=namespace).clusters()
    assert "log in again" in str(err.value.detail)


def test_taken_name_is_a_conflict(alice: KubeRayBackend, namespace: str) -> None:
    alice.create(spec("twice"), "alice")
    try:
        with pytest.raises(Conflict) as taken:
            alice.create(spec("twice"), "alice")
        assert (
            str(taken.value) == f"a cluster named 'twice' already exists in namespace {namespace!r}"
        )
        assert taken.value.detail == "choose another --name"
    finally:
        alice.delete("twice", propagation="Background")


def test_missing_namespace(admin_api: k8s_client.ApiClient) -> None:
    backend = KubeRayBackend(SETTINGS, api_client=admin_api, namespace="rl-never-made")
    assert backend.clusters() == []  # listing an absent namespace is just empty
    with pytest.raises(BackendUnavailable, match="namespace 'rl-never-made' does not exist"):
        backend.create(spec("x"), "admin")


def test_the_operators_validation_warning_is_failed_with_its_message(
    alice: KubeRayBackend, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    # raylab's own names stop at 40 characters; a RayCluster made with kubectl (with
    # raylab's labels) can be longer than the 53 KubeRay accepts.
    name = "kubectl-made-" + "x" * 47
    body = raycluster_manifest(spec("placeholder"), SETTINGS.profiles.gpu_types["cpu"],
                               owner="alice", namespace=namespace,
                               image="rayproject/ray:2.60.0", ray_version="2.60.0")  # fmt: skip
    body["metadata"]["name"] = name
    custom = k8s_client.CustomObjectsApi(admin_api)
    call_json(custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", body)
    try:
        info = wait_info(alice, name, lambda i: i.phase == Phase.FAILED, "Failed")
        assert info.reason == (
            f"KubeRay refused the cluster: The RayCluster metadata is invalid {namespace}/{name}: "
            "RayCluster name should be no more than 53 characters"
        )
        assert [c.phase for c in alice.clusters("alice") if c.name == name] == [Phase.FAILED]
        recorder = Recorder(alice)
        try:
            recorder.wait(name, "ADDED", Phase.FAILED, "no more than 53 characters")
        finally:
            recorder.close()
    finally:
        call_json(custom.delete_namespaced_custom_object, *RAY, namespace, "rayclusters", name)


def test_port_forward_without_the_right_names_it(
    admin_api: k8s_client.ApiClient,
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
) -> None:
    with new_namespace(admin_api, "rl-fwd") as namespace:
        grant(admin_api, namespace, "alice")
        grant(admin_api, namespace, "bob", without="pods/portforward")
        alice = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)
        alice.create(spec("fwd"), "alice")
        wait_info(alice, "fwd", is_ready, "Ready")
        bob = KubeRayBackend(SETTINGS, api_client=bob_api, namespace=namespace)
        with pytest.raises(Forbidden) as denied:
            bob.port_forward("fwd", 10001)
        assert str(denied.value) == (
            f"Kubernetes does not allow you to get pods/portforward in namespace {namespace!r}"
        )
        assert 'User "bob" cannot get resource "pods/portforward"' in str(denied.value.detail)
