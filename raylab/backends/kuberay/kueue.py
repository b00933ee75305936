"""Kueue's objects as raylab reads them: a RayCluster's Workload, its LocalQueue's
pending list and its ClusterQueue -> QueueInfo. Pure (plain dicts in).

Kueue (sigs.k8s.io/kueue) holds a RayCluster labelled with a LocalQueue suspended until
its Workload is admitted, then unsuspends it; it suspends it again to preempt it. A
Workload's `spec.active: false` is how its owner stops it (Kueue then suspends the
cluster and keeps it out of the queue); raylab's suspend and resume go through that, so
that Kueue's own suspension is never undone by raylab.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...model import QueueInfo
from .resources import pod_gpus, quantity

GROUP = "kueue.x-k8s.io"
VERSION = "v1beta2"
KUEUE = (GROUP, VERSION)
VISIBILITY = "/apis/visibility.kueue.x-k8s.io/v1beta2"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
GPU = "nvidia.com/gpu"


def queue_of(obj: Mapping[str, Any]) -> str:
    """The LocalQueue a RayCluster asks for ('' if none)."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return str(labels.get(QUEUE_LABEL) or "")


def owner_name(workload: Mapping[str, Any]) -> str | None:
    """The RayCluster a Workload stands for (its controller owner), else None."""
    for ref in (workload.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "RayCluster" and str(ref.get("apiVersion", "")).startswith("ray.io/"):
            return str(ref.get("name") or "") or None
    return None


def conditions(workload: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = (workload.get("status") or {}).get("conditions") or []
    return {str(c.get("type")): c for c in found if isinstance(c, dict)}


def is_true(workload: Mapping[str, Any], kind: str) -> bool:
    return (conditions(workload).get(kind) or {}).get("status") == "True"


def admitted(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, "Admitted") or (
        is_true(workload, "QuotaReserved")
        and not (workload.get("status") or {}).get("admissionChecks")
    )


def active(workload: Mapping[str, Any]) -> bool:
    return (workload.get("spec") or {}).get("active") is not False


def finished(workload: Mapping[str, Any]) -> bool:
    return is_true(workload, "Finished")


def gpus_of(workload: Mapping[str, Any]) -> int:
    """GPUs a Workload asks for: every pod set's count times its pod's GPUs."""
    return sum(
        quantity(pod_set.get("count")) * pod_gpus(pod_set.get("template") or {})
        for pod_set in (workload.get("spec") or {}).get("podSets") or []
        if isinstance(pod_set, dict)
    )


def cluster_queue_gpus(cq: Mapping[str, Any], resource: str = GPU) -> tuple[int, int]:
    """(GPUs in use, nominal GPUs) of a ClusterQueue, over all its flavors."""
    quota = 0
    for group in (cq.get("spec") or {}).get("resourceGroups") or []:
        for flavor in group.get("flavors") or []:
            for res in flavor.get("resources") or []:
                if res.get("name") == resource:
                    quota += quantity(res.get("nominalQuota"))
    used = 0
    status = cq.get("status") or {}
    for flavor in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        for res in flavor.get("resources") or []:
            if res.get("name") == resource:
                used += quantity(res.get("total"))
    return used, quota


def pending_key(entry: Mapping[str, Any], namespace: str) -> tuple[str, str]:
    """(namespace, name) of an entry of the visibility API's pending list (`namespace`
    where the entry leaves it out)."""
    meta = entry.get("metadata") or {}
    return (str(meta.get("namespace") or namespace), str(meta.get("name") or ""))


def queue_info(
    cluster: Mapping[str, Any],
    workload: Mapping[str, Any] | None,
    *,
    cluster_queue: str = "",
    pending: Iterable[Mapping[str, Any]] | None = None,
    gpus_by_workload: Mapping[tuple[str, str], int] | None = None,
    cq: Mapping[str, Any] | None = None,
) -> QueueInfo | None:
    """Where a queued RayCluster stands; None for one Kueue does not queue.

    `pending`: the ClusterQueue's (or the LocalQueue's) pending workloads from the
    visibility API, each with its positionInClusterQueue; `gpus_by_workload`: what the
    workloads ahead ask for, where readable; `cq`: the ClusterQueue, where readable.
    """
    name = queue_of(cluster)
    if not name:
        return None
    labels = (cluster.get("metadata") or {}).get("labels") or {}
    priority = str(labels.get(PRIORITY_LABEL) or "")
    if workload is None:
        return QueueInfo(name=name, priority=priority, cluster_queue=cluster_queue,
                         message="waiting for Kueue to queue it")  # fmt: skip
    admission = (workload.get("status") or {}).get("admission") or {}
    cluster_queue = str(admission.get("clusterQueue") or cluster_queue)
    conds = conditions(workload)
    evicted = conds.get("Evicted") or {}
    preempted = ""
    if (
        evicted.get("reason") == "Preempted"
        or (conds.get("Preempted") or {}).get("status") == "True"
    ):
        preempted = str((conds.get("Preempted") or evicted).get("message") or "preempted")
    used = quota = None
    if cq is not None:
        used, quota = cluster_queue_gpus(cq)
    if not active(workload):
        state = "Inactive"
    elif admitted(workload):
        state = "Admitted"
    else:
        state = "Queued"
    position = ahead = ahead_gpus = None
    if state == "Queued" and pending is not None:
        meta = workload.get("metadata") or {}
        mine = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        entries = list(pending)
        for entry in entries:
            if pending_key(entry, mine[0]) == mine:
                position = int(entry.get("positionInClusterQueue") or 0) + 1
        if position is not None:
            ahead = position - 1
            keys = [
                pending_key(e, mine[0])
                for e in entries
                if int(e.get("positionInClusterQueue") or 0) < position - 1
            ]
            known = gpus_by_workload or {}
            if len(keys) == ahead and all(k in known for k in keys):
                ahead_gpus = sum(known[k] for k in keys)
    quota_reserved = conds.get("QuotaReserved") or {}
    message = ""
    if state == "Queued":
        message = str(quota_reserved.get("message") or "")
    return QueueInfo(
        name=name,
        state=state,
        cluster_queue=cluster_queue,
        priority=priority,
        position=position,
        ahead=ahead,
        ahead_gpus=ahead_gpus,
        gpus_in_use=used,
        gpus_quota=quota,
        preempted=preempted,
        message=message,
    )
