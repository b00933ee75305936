"""Shared pieces of the KubeRay backend tests: namespaces, the documented RBAC, settings.

The Role granted here is read from docs/kubernetes-rbac.md, so the tests exercise exactly
what an admin is told to apply.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import yaml
from controlplane import GPU_RESOURCE, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from raylab.backends.base import ClusterEvent
from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.config import Settings
from raylab.model import ClusterInfo, Phase

ROOT = Path(__file__).resolve().parents[2]
RBAC_DOC = ROOT / "docs" / "kubernetes-rbac.md"
RAY = ("ray.io", "v1")
GPU_TOLERATION = {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}
KWOK_RAY_VERSION = "2.60.0"  # what the KWOK clusters say; their pods run nothing


def documented_rbac(page: Path = RBAC_DOC) -> dict[str, dict[str, Any]]:
    """The YAML blocks of a docs page (docs/kubernetes-rbac.md: the users'), by kind."""
    text = page.read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```yaml\n")[1:]]
    return {doc["kind"]: doc for doc in map(yaml.safe_load, blocks)}


def grant(
    admin_api: k8s_client.ApiClient,
    namespace: str,
    user: str,
    without: str | None = None,
    page: Path = RBAC_DOC,
) -> None:
    """Bind the Role of the docs `page` (the users') to `user` in `namespace`, and wait
    until it applies. `without` names a resource whose rule is left out (a Role that
    misses a piece)."""
    docs = documented_rbac()
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    role = documented_rbac(page)["Role"]
    name = role["metadata"]["name"] + (f"-without-{without.replace('/', '-')}" if without else "")
    role["metadata"] = {"name": name, "namespace": namespace}
    role["rules"] = [r for r in role["rules"] if without not in r["resources"]]
    with contextlib.suppress(ApiException):  # already there for another user
        call_json(rbac.create_namespaced_role, namespace, role)
    binding = docs["RoleBinding"]
    binding["metadata"] = {"name": f"raylab-{user}", "namespace": namespace}
    binding["roleRef"]["name"] = name
    binding["subjects"] = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    call_json(rbac.create_namespaced_role_binding, namespace, binding)

    probe = role["rules"][0]  # one right the Role grants, to know when the binding applies

    wait_until(f"{user} may use {probe['resources'][0]} in {namespace}",
               lambda: user_allowed(admin_api, namespace, user, probe, probe["verbs"][0]),
               timeout=30)  # fmt: skip


def user_allowed(admin_api: k8s_client.ApiClient, namespace: str, user: str,
                 rule: dict[str, Any], verb: str) -> bool:  # fmt: skip
    """Whether the API server lets `user` do `verb` on `rule`'s first resource."""
    resource, _, sub = rule["resources"][0].partition("/")
    attributes = {"namespace": namespace, "verb": verb, "group": rule["apiGroups"][0],
                  "resource": resource, "subresource": sub}  # fmt: skip
    review = {"spec": {"user": user, "resourceAttributes": attributes}}
    body = call_json(k8s_client.AuthorizationV1Api(admin_api).create_subject_access_review, review)
    return bool(body["status"].get("allowed"))


@contextlib.contextmanager
def without_rule(admin_api: k8s_client.ApiClient, user: str, resource: str, *,
                 namespace: str = "", page: Path = RBAC_DOC,
                 kind: str = "Role") -> Iterator[dict[str, Any]]:  # fmt: skip
    """The documented `kind` of `page` as made (grant's Role in `namespace`, or a
    ClusterRole), without the rule whose first resource is `resource`, until `user` is
    refused each of its verbs there (everywhere, for a ClusterRole); then whole again.
    Yields the rule."""
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    full = documented_rbac(page)[kind]
    name = full["metadata"]["name"]
    if namespace:
        full["metadata"] = {"name": name, "namespace": namespace}
    rule = next(r for r in full["rules"] if r["resources"][0] == resource)
    less = copy.deepcopy(full)
    less["rules"].remove(rule)

    def apply(role: dict[str, Any], allowed: bool) -> None:
        if namespace:
            call_json(rbac.replace_namespaced_role, name, namespace, role)
        else:
            call_json(rbac.replace_cluster_role, name, role)
        for verb in rule["verbs"]:
            wait_until(f"{user} {'allowed' if allowed else 'refused'} {verb} {resource}",
                       lambda v=verb: user_allowed(admin_api, namespace, user, rule, v) == allowed,
                       timeout=30, interval=0.05)  # fmt: skip

    apply(less, allowed=False)
    try:
        yield rule
    finally:
        apply(full, allowed=True)


@contextlib.contextmanager
def new_namespace(
    admin_api: k8s_client.ApiClient, prefix: str = "rl", labels: dict[str, str] | None = None
) -> Iterator[str]:
    """A namespace (deleted afterwards) whose default ServiceAccount exists."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core = k8s_client.CoreV1Api(admin_api)
    call_json(core.create_namespace, {"metadata": {"name": name, "labels": labels or {}}})
    # Made by the controller-manager within a second, or a few just after it restarted
    # (the harness restarts it with the API server).
    wait_until(
        f"ServiceAccount default in {name}",
        lambda: core.read_namespaced_service_account("default", name),
        timeout=60,
    )
    try:
        yield name
    finally:
        call_json(core.delete_namespace, name, propagation_policy="Background")


# Pod Security "restricted": the operator's pods are admitted only if raylab's security
# settings (and what KubeRay adds to them) are complete.
RESTRICTED = {"pod-security.kubernetes.io/enforce": "restricted"}


def settings(**options: Any) -> Settings:
    """Settings with quotas large enough for the tests' GPU requests."""
    base: dict[str, Any] = {
        "backend": "kuberay",
        "max_gpus_per_user": 256,
        "max_workers_per_cluster": 16,
        "max_clusters_per_user": 8,
    }
    return Settings.from_config(**{**base, **options})


def wait_info(
    backend: KubeRayBackend,
    name: str,
    until: Callable[[ClusterInfo], bool],
    what: str,
    timeout: float = 60,
) -> ClusterInfo:
    def probe() -> ClusterInfo | None:
        info = backend.get(name)
        return info if info is not None and until(info) else None

    return wait_until(f"{name}: {what}", probe, timeout=timeout, interval=0.2)


def is_ready(info: ClusterInfo) -> bool:
    return info.phase == Phase.READY


def ray_pods(api: k8s_client.ApiClient, namespace: str, cluster: str) -> list[dict[str, Any]]:
    selector = f"ray.io/cluster={cluster}"
    pods: list[dict[str, Any]] = call_json(
        k8s_client.CoreV1Api(api).list_namespaced_pod, namespace, label_selector=selector
    )["items"]
    return pods


def user_kubeconfig(source: Path, namespace: str, dest: Path) -> Path:
    """A copy of a user's kubeconfig whose context names `namespace`."""
    doc = yaml.safe_load(source.read_text())
    for context in doc["contexts"]:
        context["context"]["namespace"] = namespace
    dest.write_text(yaml.safe_dump(doc))
    dest.chmod(0o600)
    return dest


class Recorder:
    """Runs backend.watch in a thread and keeps what it yields."""

    def __init__(self, backend: KubeRayBackend) -> None:
        self.events: list[ClusterEvent] = []
        self.health: list[str | None] = []  # what on_health heard
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(backend,), daemon=True)
        self.thread.start()

    @staticmethod
    def never() -> threading.Event:
        """A stop event for a watch that is only started."""
        return threading.Event()

    def _run(self, backend: KubeRayBackend) -> None:
        try:
            for event in backend.watch(self.stop, on_health=self.health.append):
                self.events.append(event)
        except BaseException as exc:
            self.error = exc

    def seen(self, name: str, type_: str, phase: Phase | None = None, text: str = "") -> bool:
        return any(
            e.cluster.name == name
            and e.type == type_
            and (phase is None or e.cluster.phase == phase)
            and text in e.cluster.reason
            for e in list(self.events)
        )

    def wait(self, name: str, type_: str, phase: Phase | None = None, text: str = "") -> None:
        what = f"watch: {type_} {name} {phase or ''} {text}"
        wait_until(what, lambda: self.seen(name, type_, phase, text) or self._check(), 60, 0.1)

    def _check(self) -> bool:
        if self.error is not None:
            raise self.error
        return False

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        assert not self.thread.is_alive(), "the watch did not stop"


def kwok_raycluster(
    name: str, gpus: int = 1, gpu_type: str = "a100", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    """A plain RayCluster for the KWOK nodes, as kubectl would apply it: a head (1 cpu, no
    GPU, no toleration) and one worker with `gpus` GPUs of `gpu_type` (its nodeSelector
    and the GPU toleration, as raylab's own manifests)."""

    def container(role: str, cpu: str, memory: str, gpus: int = 0) -> dict[str, Any]:
        limits = {"cpu": cpu, "memory": memory}
        if gpus:
            limits[GPU_RESOURCE] = str(gpus)
        return {
            "name": f"ray-{role}",
            "image": f"rayproject/ray:{KWOK_RAY_VERSION}",  # never pulled
            "resources": {"requests": dict(limits), "limits": limits},
        }

    worker = {
        "nodeSelector": {"raylab.io/gpu-type": gpu_type},
        "tolerations": [dict(GPU_TOLERATION)],
        "containers": [container("worker", "8", "64Gi", gpus)],
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "rayVersion": KWOK_RAY_VERSION,
            "headGroupSpec": {
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("head", "1", "4Gi")]}},
            },
            "workerGroupSpecs": [
                {
                    "groupName": gpu_type,
                    "replicas": 1,
                    "minReplicas": 1,
                    "maxReplicas": 1,
                    "rayStartParams": {},
                    "template": {"spec": worker},
                }
            ],
        },
    }
