"""GPUs and workers as a RayCluster's object asks for them. Pure: plain dicts in.

What a cluster holds is read from the pod templates and replica counts, which are what
the operator and the scheduler act on, never from raylab's `raylab.io/spec` annotation:
its owner can edit that (a merge patch) to claim fewer GPUs than the pods request.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

# Kubernetes quantity suffixes (resource.Quantity).
_SUFFIXES: dict[str, Decimal | int] = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


@dataclass(frozen=True)
class WorkerGroup:
    # Pods, not replicas: a replica is numOfHosts pods (a multi-host worker).
    gpus: int  # per pod
    pods: int  # as the object asks now
    least: int  # at minReplicas
    most: int  # the most the operator may run: at maxReplicas when autoscaling


def quantity(value: object) -> int:
    """A quantity as a whole number, rounded up (GPUs are whole; unreadable is 0: the
    API server has validated the object's quantities against the CRD's pattern)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return max(0, value)
    text = str(value).strip()
    scale: Decimal | int = 1
    for suffix, factor in _SUFFIXES.items():
        if text.endswith(suffix):
            text, scale = text[: -len(suffix)], factor
            break
    try:
        number = Decimal(text) * scale
    except InvalidOperation:
        return 0
    return max(0, math.ceil(number)) if number.is_finite() else 0


def pod_gpus(template: Mapping[str, Any]) -> int:
    """The `*/gpu` a pod template asks for, as the scheduler counts it: per container the
    larger of request and limit, summed over containers; an init container alone may
    ask for more (the pod holds that much while it starts)."""
    spec = template.get("spec") or {}

    def gpus(container: Mapping[str, Any]) -> int:
        resources = container.get("resources") or {}
        found: dict[str, int] = {}
        for kind in ("requests", "limits"):
            for key, value in (resources.get(kind) or {}).items():
                if str(key).endswith("/gpu"):
                    found[key] = max(found.get(key, 0), quantity(value))
        return sum(found.values())

    running = sum(gpus(c) for c in spec.get("containers") or [] if isinstance(c, dict))
    starting = [gpus(c) for c in spec.get("initContainers") or [] if isinstance(c, dict)]
    return max([running, *starting])


def worker_groups(obj: Mapping[str, Any]) -> list[WorkerGroup]:
    spec = obj.get("spec") or {}
    autoscaling = bool(spec.get("enableInTreeAutoscaling"))
    groups = []
    for group in spec.get("workerGroupSpecs") or []:
        if not isinstance(group, dict):
            continue
        hosts = max(1, _int(group.get("numOfHosts"), 1))
        replicas = _int(group.get("replicas"), 0)
        low = _int(group.get("minReplicas"), 0)
        # The CRD's default maxReplicas is 2^31-1: unbounded, and counted so.
        high = _int(group.get("maxReplicas"), 2**31 - 1)
        # KubeRay runs replicas clamped to [min, max] (max when min > max); the
        # autoscaler may grow a group to max at any time.
        most = high if autoscaling or low > high else max(low, min(replicas, high))
        groups.append(
            WorkerGroup(
                gpus=pod_gpus(group.get("template") or {}),
                pods=replicas * hosts,
                least=low * hosts,
                most=most * hosts,
            )
        )
    return groups


def head_gpus(obj: Mapping[str, Any]) -> int:
    head = (obj.get("spec") or {}).get("headGroupSpec") or {}
    return pod_gpus(head.get("template") or {})


def most_gpus(obj: Mapping[str, Any]) -> int:
    """The most GPUs the cluster's pods may request at once: the head, and every worker
    group at its most replicas. Suspended or scaled to zero, it may come back to that
    without raylab, so that is what it holds of its owner's quota."""
    return head_gpus(obj) + sum(g.gpus * g.most for g in worker_groups(obj))


def _int(value: object, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    return default
