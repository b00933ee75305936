"""ClusterSpec + GPU profile -> a KubeRay `RayCluster` (ray.io/v1) manifest. Pure: no I/O.

One parameterized template replaces hand-written, GPU-specific YAML. The object carries
everything the KubeRay backend needs to read it back (the ClusterSpec as JSON, the owner,
the Python minor of the image), so the RayCluster in Kubernetes stays the only truth.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime
from typing import Any

from ...identity import owner_label
from ...model import IdleState
from ...profiles import GpuProfile
from ...spec import ClusterSpec
from ..base import CLIENT_SERVER_ENV
from .probes import ray_probes

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY = "raylab"
NAME_LABEL = "app.kubernetes.io/name"
OWNER_LABEL = "raylab.io/owner"
GPU_TYPE_LABEL = "raylab.io/gpu-type"
OWNER_ANNOTATION = "raylab.io/owner"  # the username as typed; the label is a safe form of it
SPEC_ANNOTATION = "raylab.io/spec"
PYTHON_ANNOTATION = "raylab.io/python-version"
# The culler's idle state (model.IdleState) as canonical JSON with UTC times, so that a
# JSON-patch `test` of the value read makes each write conditional (culler/sweep.py).
IDLE_ANNOTATION = "raylab.io/idle"
# The ClusterEnvironment it remembers (model.py), as JSON.
ENVIRONMENT_ANNOTATION = "raylab.io/environment"
# When a cell last ran in a kernel connected to it (epoch seconds; ClusterInfo.cell_at).
CELL_ANNOTATION = "raylab.io/cell-at"
# A standby's end (epoch seconds; ClusterInfo.standby_until): removed when it is claimed.
STANDBY_ANNOTATION = "raylab.io/standby-until"

WORKER_GROUP = "gpu-workers"
HEAD_CONTAINER = "ray-head"  # KubeRay runs Ray in the first container; logs come from it
WORKER_CONTAINER = "ray-worker"
GCS_PORT = 6379
DASHBOARD_PORT = 8265
CLIENT_PORT = 10001
METRICS_PORT = 8080  # what KubeRay passes to `ray start --metrics-export-port`
SERVE_PORT = 8000  # Serve's own default: each cluster's head is a pod of its own
# The ports a direct driver (a kernel in a pod, joined as a node: joined_node.py) uses on
# every node besides the head's GCS: fixed, so the NetworkPolicies can name them. Ray
# picks the node manager and object manager ports at random unless told; its worker
# processes listen in its default range, stated here.
NODE_MANAGER_PORT = 8076
OBJECT_MANAGER_PORT = 8077
WORKER_PORTS = (10002, 19999)
# A kernel's own node: a (node manager, object manager) pair from this range per kernel
# of the notebook pod, which its NetworkPolicy admits from the clusters' pods (with
# WORKER_PORTS: the driver listens there too).
KERNEL_NODE_PORTS = (8078, 8097)
# rayproject/ray images run as user `ray`: uid 1000, primary group `users` (100).
RAY_UID = 1000
RAY_GID = 100

_IMAGE_TAG = re.compile(r":(\d+\.\d+\.\d+)(?:-py(\d)(\d+))?(?:-[A-Za-z0-9_.-]+)?(?:@.*)?$")


def cluster_labels(owner: str, gpu_type: str) -> dict[str, str]:
    """Labels on the RayCluster and on its pod templates (so pods show their owner too)."""
    return {
        MANAGED_BY_LABEL: MANAGED_BY,
        OWNER_LABEL: owner_label(owner),
        GPU_TYPE_LABEL: owner_label(gpu_type),
    }


def versions_from_image(image: str) -> tuple[str | None, str | None]:
    """(Ray version, Python minor) from a rayproject-style tag such as 2.60.0-py311-gpu.

    None where the tag does not say: a custom image is then assumed to match the kernel.
    """
    match = _IMAGE_TAG.search(image)
    if not match:
        return None, None
    ray_version, major, minor = match.groups()
    return ray_version, f"{major}.{minor}" if major else None


def raycluster_manifest(
    spec: ClusterSpec,
    profile: GpuProfile,
    *,
    owner: str,
    namespace: str,
    image: str,
    ray_version: str,
    python_version: str | None = None,
    service_account: str | None = None,
    head_cpus: str = "2",
    head_memory: str = "8Gi",
    ray_env: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The RayCluster for `spec`: one head (no GPUs) and one worker group on `profile`.

    `ray_env` goes to every Ray container and the autoscaler (the token, see
    manifest_security.py)."""
    ray_env = ray_env or []
    python_version = python_version or f"{sys.version_info.major}.{sys.version_info.minor}"
    labels = cluster_labels(owner, spec.gpu_type)
    has_workers = spec.workers > 0 or spec.autoscaling
    fixed_ports = {
        "node-manager-port": str(NODE_MANAGER_PORT),
        "object-manager-port": str(OBJECT_MANAGER_PORT),
    }
    head_params = {"dashboard-host": "0.0.0.0", "num-gpus": "0", **fixed_ports}
    if has_workers:
        head_params["num-cpus"] = "0"  # tasks go to the workers, the head only coordinates
    else:
        head_cpus, head_memory = spec.cpus, spec.memory  # a lone head does the work itself
    head_ports = [
        {"name": "gcs-server", "containerPort": GCS_PORT},
        {"name": "dashboard", "containerPort": DASHBOARD_PORT},
        {"name": "client", "containerPort": CLIENT_PORT},
        # In the head Service too (KubeRay routes the head container's ports).
        {"name": "serve", "containerPort": SERVE_PORT},
    ]
    head = _container(HEAD_CONTAINER, image, head_cpus, head_memory, {}, head_ports)
    head.update(ray_probes(dashboard_port=DASHBOARD_PORT))  # else KubeRay's, 10 s late
    head["env"] = [{"name": k, "value": v} for k, v in CLIENT_SERVER_ENV.items()] + ray_env
    worker_resources: dict[str, str] = {}
    worker_params: dict[str, str] = dict(fixed_ports)
    if spec.gpus_per_worker:
        worker_resources[profile.resource_key] = str(spec.gpus_per_worker)
        # Explicit, so a resource key other than nvidia.com/gpu still counts as GPUs.
        worker_params["num-gpus"] = str(spec.gpus_per_worker)
    worker = _container(WORKER_CONTAINER, image, spec.cpus, spec.memory, worker_resources)
    worker.update(ray_probes(dashboard_port=None))
    worker_env = [*ray_env, *({"name": k, "value": v} for k, v in profile.worker_env.items())]
    if worker_env:
        worker["env"] = worker_env
    low, high = (
        (spec.min_workers or 0, spec.max_workers or 0)
        if spec.autoscaling
        else (spec.workers, spec.workers)
    )
    group: dict[str, Any] = {
        "groupName": WORKER_GROUP,
        "replicas": spec.workers,
        "minReplicas": low,
        "maxReplicas": high,
        "rayStartParams": worker_params,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": {
                **_pod(worker, spec.memory, service_account, token=bool(service_account)),
                "nodeSelector": dict(profile.node_selector),
                "tolerations": [dict(t) for t in profile.tolerations],
            },
        },
    }
    # The in-tree autoscaler runs beside Ray in the head pod and calls the Kubernetes API
    # with the head's service-account token: only then does the head mount one.
    head_token = bool(service_account) or spec.autoscaling
    cluster_spec: dict[str, Any] = {
        "rayVersion": ray_version,
        "headGroupSpec": {
            "rayStartParams": head_params,
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    **_pod(head, head_memory, service_account, token=head_token),
                    **_placement(profile.head_node_selector, profile.head_tolerations),
                },
            },
        },
        "workerGroupSpecs": [group],
    }
    if spec.autoscaling:
        cluster_spec["enableInTreeAutoscaling"] = True
        options: dict[str, Any] = {"securityContext": container_security_context()}
        if ray_env:
            options["env"] = list(ray_env)
        if spec.idle_timeout_minutes:
            seconds = spec.idle_timeout_minutes * 60
            options["idleTimeoutSeconds"] = seconds
            group["idleTimeoutSeconds"] = seconds
        cluster_spec["autoscalerOptions"] = options
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {
            "name": spec.name,
            "namespace": namespace,
            "labels": {**labels, NAME_LABEL: "ray"},
            "annotations": {
                OWNER_ANNOTATION: owner,
                SPEC_ANNOTATION: spec_annotation(spec),
                PYTHON_ANNOTATION: python_version,
                IDLE_ANNOTATION: idle_annotation(IdleState()),
            },
        },
        "spec": cluster_spec,
    }


def idle_annotation(idle: IdleState) -> str:
    """Canonical: the same state always gives the same text (`test` compares text)."""
    body: dict[str, str] = {}
    for key, value in sorted(idle.to_json().items()):
        body[key] = _utc(value) if isinstance(value, float) else str(value)
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def idle_from_annotation(text: str | None) -> IdleState:
    try:
        data = json.loads(text or "{}")
    except ValueError:
        return IdleState()
    if not isinstance(data, dict):
        return IdleState()
    parsed: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(value, str) and key != "unknown_reason":
            try:
                parsed[key] = datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
        else:
            parsed[key] = value
    return IdleState.from_json(parsed)


def _utc(epoch: float) -> str:
    # Whole seconds, rounded down: a stored deadline is never later than the one decided.
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def spec_annotation(spec: ClusterSpec) -> str:
    return json.dumps(spec.to_json(), sort_keys=True, separators=(",", ":"))


def container_security_context() -> dict[str, Any]:
    """What Pod Security "restricted" asks of every container."""
    return {
        "runAsNonRoot": True,
        "runAsUser": RAY_UID,
        "runAsGroup": RAY_GID,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def _container(
    name: str,
    image: str,
    cpus: str,
    memory: str,
    extra: dict[str, str],
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    resources = {"cpu": cpus, "memory": memory, **extra}
    container: dict[str, Any] = {
        "name": name,
        "image": image,
        "imagePullPolicy": "IfNotPresent",
        # Requests equal to limits: Ray sizes itself from them, and the pod is not
        # squeezed by neighbours (Guaranteed QoS).
        "resources": {"requests": dict(resources), "limits": dict(resources)},
        "securityContext": container_security_context(),
        "volumeMounts": [{"name": "shm", "mountPath": "/dev/shm"}],
        # A crash's last log lines become the container's termination message, which
        # raylab's status shows ("CrashLoopBackOff: ... exited with 1: <that line>").
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if ports:
        container["ports"] = ports
    return container


def _placement(selector: dict[str, str], tolerations: list[dict[str, str]]) -> dict[str, Any]:
    """nodeSelector and tolerations, each only if it says something."""
    placement: dict[str, Any] = {}
    if selector:
        placement["nodeSelector"] = dict(selector)
    if tolerations:
        placement["tolerations"] = [dict(t) for t in tolerations]
    return placement


def _pod(
    container: dict[str, Any], memory: str, service_account: str | None, *, token: bool
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RAY_UID,
            "runAsGroup": RAY_GID,
            "fsGroup": RAY_GID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        # Ray code has no business with the Kubernetes API unless the admin says so.
        "automountServiceAccountToken": token,
        "containers": [container],
        # Ray's object store lives in /dev/shm; a container runtime's default is 64 MiB.
        # Memory-backed, so it counts against the container's memory limit.
        "volumes": [{"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": memory}}],
    }
    if service_account:
        pod["serviceAccountName"] = service_account
    return pod
