"""ClusterSpec + profile -> RayCluster: the pure function, then the real API server's verdict."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from controlplane import call_json
from kubernetes import client as k8s_client

from raylab.backends.kuberay.manifest import (
    OWNER_LABEL,
    owner_label,
    raycluster_manifest,
    versions_from_image,
)
from raylab.profiles import DEFAULT_PROFILES, GpuProfile, Profiles
from raylab.spec import ClusterSpec

from .kuberay_support import RAY, new_namespace

PROFILES = Profiles()
IMAGE = "rayproject/ray:2.60.0-py311-gpu"


def spec(**fields: Any) -> ClusterSpec:
    return ClusterSpec.from_mapping({"name": "demo", **fields}, PROFILES)


def manifest(s: ClusterSpec, **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "owner": "Alice@Example.com",
        "namespace": "ml",
        "image": IMAGE,
        "ray_version": "2.60.0",
        "python_version": "3.11",
    }
    return raycluster_manifest(s, PROFILES.gpu_types[s.gpu_type], **{**args, **kwargs})


def pods(m: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    head = m["spec"]["headGroupSpec"]["template"]["spec"]
    worker = m["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    return head, worker


def test_a100_workers_get_gpus_node_selection_and_tolerations() -> None:
    m = manifest(spec(gpus=4, gpu_type="a100", workers=2))
    assert (m["apiVersion"], m["kind"]) == ("ray.io/v1", "RayCluster")
    assert m["spec"]["rayVersion"] == "2.60.0"
    group = m["spec"]["workerGroupSpecs"][0]
    assert group["groupName"] == "gpu-workers"
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    head, worker = pods(m)
    resources = worker["containers"][0]["resources"]
    for side in ("requests", "limits"):
        assert resources[side] == {"cpu": "12", "memory": "96Gi", "nvidia.com/gpu": "2"}
    assert worker["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert worker["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    # Fixed ports on every node, which the NetworkPolicies name for a direct driver.
    fixed = {"node-manager-port": "8076", "object-manager-port": "8077"}
    assert group["rayStartParams"] == {"num-gpus": "2", **fixed}
    # The head: no GPUs, no GPU toleration, does no work while there are workers.
    assert "nvidia.com/gpu" not in json.dumps(head)
    assert head["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "8Gi"}
    params = m["spec"]["headGroupSpec"]["rayStartParams"]
    assert params == {"dashboard-host": "0.0.0.0", "num-gpus": "0", "num-cpus": "0", **fixed}
    ports = {p["name"]: p["containerPort"] for p in head["containers"][0]["ports"]}
    # Serve's too: the head Service routes it (KubeRay makes it from these).
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "serve": 8000}
    assert "enableInTreeAutoscaling" not in m["spec"]


def test_a_profile_can_place_the_heads_too() -> None:
    pool = {"pool": "ray-heads"}
    toleration = {"key": "pool", "operator": "Exists", "effect": "NoSchedule"}
    profile = GpuProfile.from_mapping("a100", {
        "description": "A100", "node_selector": {"gpu": "a100"},
        "head_node_selector": pool, "head_tolerations": [toleration],
    })  # fmt: skip
    m = raycluster_manifest(spec(gpus=2, workers=1), profile, owner="alice", namespace="ml",
                            image=IMAGE, ray_version="2.60.0")  # fmt: skip
    head, worker = pods(m)
    assert (head["nodeSelector"], head["tolerations"]) == (pool, [toleration])
    assert worker["nodeSelector"] == {"gpu": "a100"}
    # Without them (the default) the head goes to any node without taints.
    default_head, _ = pods(manifest(spec(gpus=2, workers=1)))
    assert "nodeSelector" not in default_head
    assert "tolerations" not in default_head
    # Crashes leave their last log lines in the pod status, for raylab's status line.
    for p in (head, worker):
        assert p["containers"][0]["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_security_defaults_on_every_pod() -> None:
    for p in pods(manifest(spec(gpus=8, workers=1))):
        assert p["securityContext"]["runAsNonRoot"] is True
        assert p["securityContext"]["runAsUser"] == 1000
        assert p["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert p["automountServiceAccountToken"] is False
        assert "serviceAccountName" not in p
        for key in ("hostNetwork", "hostPID", "hostIPC"):
            assert not p.get(key)
        assert all("hostPath" not in v for v in p["volumes"])
        assert {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": p["containers"][0][
            "resources"]["limits"]["memory"]}} in p["volumes"]  # fmt: skip
        container = p["containers"][0]
        assert container["volumeMounts"] == [{"name": "shm", "mountPath": "/dev/shm"}]
        security = container["securityContext"]
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"] == {"drop": ["ALL"]}
        assert security["runAsNonRoot"] is True


def test_a_configured_service_account_is_used_and_mounted() -> None:
    for p in pods(manifest(spec(workers=1), service_account="ray-jobs")):
        assert p["serviceAccountName"] == "ray-jobs"
        assert p["automountServiceAccountToken"] is True


def test_autoscaling_sets_range_idle_timeout_and_lets_the_autoscaler_reach_the_api() -> None:
    m = manifest(spec(gpus=2, workers=1, min_workers=0, max_workers=4, idle_timeout_minutes=5))
    assert m["spec"]["enableInTreeAutoscaling"] is True
    group = m["spec"]["workerGroupSpecs"][0]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 0, 4)
    assert group["idleTimeoutSeconds"] == 300
    options = m["spec"]["autoscalerOptions"]
    assert options["idleTimeoutSeconds"] == 300
    assert options["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    head, worker = pods(m)
    assert head["automountServiceAccountToken"] is True  # the autoscaler sidecar needs it
    assert worker["automountServiceAccountToken"] is False


def test_a_head_without_workers_does_the_work() -> None:
    m = manifest(spec(gpus=0, workers=0, cpus="3", memory="5Gi"))
    head, _ = pods(m)
    assert "num-cpus" not in m["spec"]["headGroupSpec"]["rayStartParams"]
    assert head["containers"][0]["resources"]["limits"] == {"cpu": "3", "memory": "5Gi"}
    assert m["spec"]["workerGroupSpecs"][0]["replicas"] == 0  # there to scale up later


def test_the_heads_ray_client_proxy_runs_without_grpc_fork_handlers() -> None:
    # With them on, the proxy's fork of a client's server now and then crashed (SIGSEGV
    # before exec, seen with strace) and that client waited 30 s for an error.
    head, worker = pods(manifest(spec(gpus=2, workers=1)))
    assert {"name": "GRPC_ENABLE_FORK_SUPPORT", "value": "0"} in head["containers"][0]["env"]
    assert "env" not in worker["containers"][0]


def test_ray_containers_are_probed_every_second_with_kuberays_checks() -> None:
    # Without its own probes, KubeRay v1.5.0 first asks 10 s after start, then every 5 s.
    m = manifest(spec(gpus=2, workers=1, min_workers=0, max_workers=2))
    head, worker = pods(m)
    raylet = "wget --tries 1 -T 1 -q -O- http://localhost:52365/api/local_raylet_healthz"
    gcs = "wget --tries 1 -T 1 -q -O- http://localhost:8265/api/gcs_healthz"
    for p, checks in ((head, [raylet, gcs]), (worker, [raylet])):
        ready = p["containers"][0]["readinessProbe"]
        assert ready["exec"]["command"] == [
            "bash", "-c", " && ".join(f"{c} | grep success" for c in checks)]  # fmt: skip
        assert (ready["initialDelaySeconds"], ready["periodSeconds"]) == (0, 1)
        assert ready["timeoutSeconds"] == len(checks)
        # A slow-but-alive pod stays Ready as long as with KubeRay's 10 tries at 5 s.
        assert ready["failureThreshold"] * ready["periodSeconds"] == 50
        live = p["containers"][0]["livenessProbe"]
        assert live["exec"]["command"][-1].count("| grep success") == len(checks)
        # KubeRay's: never kills a busy Ray before 10 minutes of failures in a row.
        assert (live["initialDelaySeconds"], live["periodSeconds"]) == (30, 5)
        assert live["failureThreshold"] == 120
    # The autoscaler sidecar (KubeRay's, from autoscalerOptions) gets none.
    assert not {"readinessProbe", "livenessProbe"} & set(m["spec"]["autoscalerOptions"])


def test_labels_and_annotations_show_owner_and_origin() -> None:
    s = spec(gpus=4, workers=2)
    m = manifest(s)
    labels = m["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "raylab"
    assert labels["app.kubernetes.io/name"] == "ray"
    assert labels[OWNER_LABEL] == owner_label("Alice@Example.com")
    assert labels["raylab.io/gpu-type"] == "a100"
    annotations = m["metadata"]["annotations"]
    assert annotations["raylab.io/owner"] == "Alice@Example.com"
    assert annotations["raylab.io/python-version"] == "3.11"
    assert ClusterSpec(**json.loads(annotations["raylab.io/spec"])) == s
    # Pods show their owner too (KubeRay copies template labels onto pods).
    for p in ("headGroupSpec",):
        assert m["spec"][p]["template"]["metadata"]["labels"][OWNER_LABEL] == labels[OWNER_LABEL]


@pytest.mark.parametrize(
    ("username", "expected"),
    [("alice", "alice"), ("bob-2", "bob-2"), ("alice-example-com", "alice-example-com")],
)
def test_safe_usernames_are_kept(username: str, expected: str) -> None:
    assert owner_label(username) == expected


def test_other_usernames_get_a_hash_and_never_collide() -> None:
    names = [
        "Alice@Example.com",
        "alice@example.com",
        "alice-example-com",
        "alice.example.com",
        "ALICE",
        "",
        "-",
        "ü" * 80,
        "x" * 80,
        "x" * 81,
        f"alice-example-com-{owner_label('Alice@Example.com')[-8:]}",
    ]
    labels = [owner_label(n) for n in names]
    assert len(set(labels)) == len(names), labels
    for label in labels:
        assert re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", label), label
    assert owner_label("Alice@Example.com").startswith("alice-example-com-")


def test_versions_come_from_rayproject_tags() -> None:
    assert versions_from_image("rayproject/ray:2.60.0-py311-gpu") == ("2.60.0", "3.11")
    assert versions_from_image("rayproject/ray-ml:2.59.1-py310") == ("2.59.1", "3.10")
    assert versions_from_image("rayproject/ray:2.60.0") == ("2.60.0", None)
    assert versions_from_image("my/ray:latest") == (None, None)


def test_every_profile_is_accepted_by_the_api_server(admin_api: k8s_client.ApiClient) -> None:
    """Server-side dry run: the real CRD schema validates each manifest, nothing is stored."""
    custom = k8s_client.CustomObjectsApi(admin_api)
    requests: list[dict[str, Any]] = []
    for name, profile in DEFAULT_PROFILES.items():
        gpus = profile.max_gpus_per_worker
        requests.append({"gpu_type": name, "gpus": gpus, "workers": 1})
        requests.append(
            {"gpu_type": name, "gpus": gpus * 2, "workers": 2, "min_workers": 1,
             "max_workers": 4, "idle_timeout_minutes": 10}
        )  # fmt: skip
    requests.append({"gpu_type": "cpu", "gpus": 0, "workers": 0})
    with new_namespace(admin_api, "rl-dry") as namespace:
        for i, request in enumerate(requests):
            s = ClusterSpec.from_mapping({"name": f"dry-{i}", **request}, PROFILES)
            body = manifest(s, namespace=namespace, service_account="sa" if i % 2 else None)
            stored = call_json(
                custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", body,
                dry_run="All", field_validation="Strict",
            )  # fmt: skip
            # Strict field validation: an unknown field would have been an error; and
            # the schema's defaulting did not change what we asked for.
            assert stored["spec"]["workerGroupSpecs"][0]["replicas"] == s.workers
        listed = call_json(custom.list_namespaced_custom_object, *RAY, namespace, "rayclusters")
        assert listed["items"] == []
