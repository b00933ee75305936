"""A user's onboarding objects as manifests. Pure: no I/O.

Every object carries raylab's labels (`app.kubernetes.io/managed-by: raylab`, the
owner's safe label) so that `kubectl get -l` finds them, and the username as typed in
an annotation; a settings copy in a namespace that all users' pods share has no owner.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..backends.kuberay.config import resolve_namespace
from ..backends.kuberay.manifest import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_ANNOTATION,
    OWNER_LABEL,
)
from ..config import Settings
from ..errors import RaylabError
from ..identity import owner_label
from .settings import RaylabOnboarding

COMPONENT_LABEL = "app.kubernetes.io/component"
COMPONENT = "onboarding"
# The name README.md gives the per-user quota: one an admin made by hand is adopted.
QUOTA_NAME = "raylab-user"
KUEUE_VERSION = "kueue.x-k8s.io/v1beta2"


@dataclass(frozen=True)
class Plan:
    """What onboarding one user makes, in the order it is applied (the namespace first,
    the RoleBinding that grants the rights last)."""

    username: str
    namespace: str
    service_account: str
    service_account_namespace: str
    manifests: tuple[dict[str, Any], ...]


def plan(
    username: str,
    settings: Settings,
    onboarding: RaylabOnboarding,
    account_namespace: str | None = None,
    config: Mapping[str, Any] | None = None,
) -> Plan:
    """The objects for `username`. `account_namespace` is where their notebook pod (so
    its service account) lives; None: their own Ray namespace. `config`: the chart's
    settings ConfigMap, to copy into that namespace (see `copies_config`)."""
    template = settings.options.namespace_template
    if "{username}" not in template:
        raise RaylabError(
            f"onboarding needs a namespace per user, and c.Raylab.namespace_template "
            f"{template!r} has no {{username}}",
            detail="set namespace_template, e.g. 'ray-{username}'",
        )
    owner = owner_label(username)
    namespace = resolve_namespace(settings, username, None)
    account = _format(onboarding.service_account, owner, "service_account")
    account_ns = pod_namespace(username, settings, account_namespace)
    labels = {MANAGED_BY_LABEL: MANAGED_BY, OWNER_LABEL: owner, COMPONENT_LABEL: COMPONENT}

    def meta(name: str, ns: str | None = None, extra: dict[str, str] | None = None) -> Any:
        out: dict[str, Any] = {
            "name": name,
            "labels": {**(extra or {}), **labels},
            "annotations": {OWNER_ANNOTATION: username},
        }
        if ns is not None:
            out["namespace"] = ns
        return out

    manifests: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": meta(namespace, extra=dict(onboarding.namespace_labels)),
        },
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(account, account_ns)},
    ]
    if config is not None:
        manifests.append(config_copy(config, meta(onboarding.config_map, account_ns),
                                     own=account_ns == namespace))  # fmt: skip
    if onboarding.resource_quota:
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": meta(QUOTA_NAME, namespace),
                "spec": {"hard": quota_hard(settings, onboarding)},
            }
        )
    if onboarding.cluster_queue:
        for queue in local_queues(settings):
            manifests.append(
                {
                    "apiVersion": KUEUE_VERSION,
                    "kind": "LocalQueue",
                    "metadata": meta(queue, namespace),
                    "spec": {"clusterQueue": onboarding.cluster_queue},
                }
            )
    manifests.append(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            # Not the docs' hand-made name (raylab-user, bound to a Role): roleRef cannot
            # change, so taking that binding over would fail.
            "metadata": meta(f"{onboarding.cluster_role}-{owner}", namespace),
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": onboarding.cluster_role,
            },
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": account_ns}],
        }
    )
    return Plan(username, namespace, account, account_ns, tuple(manifests))


def pod_namespace(username: str, settings: Settings, account_namespace: str | None) -> str:
    """The namespace of `username`'s notebook pod (see `plan`)."""
    return account_namespace or resolve_namespace(settings, username, None)


def copies_config(onboarding: RaylabOnboarding, pod_ns: str, config_ns: str) -> bool:
    """A pod can mount only a ConfigMap of its own namespace: one outside the chart's
    (enable_user_namespaces) gets a copy of its settings ConfigMap."""
    return bool(onboarding.config_map) and pod_ns != config_ns


def config_copy(source: Mapping[str, Any], metadata: dict[str, Any], own: bool) -> dict[str, Any]:
    """The chart's ConfigMap `source` as it goes into the pod's namespace: its data as
    they are, under onboarding's `metadata`. In a namespace that is not the user's own
    (a shared one of the pods), the copy is everyone's: no owner on it."""
    if not own:
        metadata["labels"].pop(OWNER_LABEL, None)
        metadata.pop("annotations", None)
    out: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata}
    for key in ("data", "binaryData"):
        if source.get(key):
            out[key] = dict(source[key])
    return out


def quota_hard(settings: Settings, onboarding: RaylabOnboarding) -> dict[str, str]:
    """The ResourceQuota's limits: as configured, else raylab's own quotas."""
    if onboarding.resource_quota_hard:
        return {str(k): str(v) for k, v in onboarding.resource_quota_hard.items()}
    o = settings.options
    keys = sorted({p.resource_key for p in settings.profiles.gpu_types.values() if p.has_gpus})
    hard = {f"requests.{key}": str(o.max_gpus_per_user) for key in keys}
    hard["count/rayclusters.ray.io"] = str(o.max_clusters_per_user)
    return hard


def local_queues(settings: Settings) -> list[str]:
    """Every LocalQueue new clusters may wait in: c.Raylab's and the GPU types' own."""
    names = {settings.local_queue(name) for name in settings.profiles.gpu_types}
    names.add(str(settings.options.local_queue))
    return sorted(n for n in names if n)


def _format(template: str, owner: str, option: str) -> str:
    try:
        return template.format(username=owner)
    except (KeyError, IndexError, ValueError) as exc:
        raise RaylabError(
            f"c.RaylabOnboarding.{option} {template!r} is not valid ({exc!r})",
            detail="the only placeholder is {username}, e.g. 'raylab-{username}'",
        ) from exc
