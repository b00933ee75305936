"""A RayCluster object, its pods and its events -> ClusterInfo. Pure (plain dicts in) but
for the clock, which says how long the operator has left a new object alone.

Conditions and pods are the truth; `.status.state` is deprecated and sticky (it never
leaves "ready"), so it is not read at all. A just-created object has no `.status`:
everything here copes with missing fields. Why a pod waits (Insufficient nvidia.com/gpu)
is on the pod's PodScheduled condition, not on the RayCluster, so pods are an input.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from ...model import (
    ClusterEnvironment,
    ClusterInfo,
    Endpoints,
    Phase,
    QueueInfo,
    finite_time,
    suspension_reason,
)
from ...spec import ClusterSpec
from ...startup.phases import PULLING_REASON
from .manifest import (
    CELL_ANNOTATION,
    CLIENT_PORT,
    DASHBOARD_PORT,
    ENVIRONMENT_ANNOTATION,
    GPU_TYPE_LABEL,
    IDLE_ANNOTATION,
    METRICS_PORT,
    OWNER_ANNOTATION,
    OWNER_LABEL,
    PYTHON_ANNOTATION,
    SERVE_PORT,
    SPEC_ANNOTATION,
    STANDBY_ANNOTATION,
    WORKER_GROUP,
    idle_from_annotation,
)
from .resources import most_gpus, worker_groups

BACKEND = "kuberay"
# Warning events the operator writes when it refuses a RayCluster (and then writes no
# status at all): name too long, a group without containers, min > max, ...
VALIDATION_REASONS = frozenset(
    {"InvalidRayClusterMetadata", "InvalidRayClusterSpec", "InvalidRayClusterStatus"}
)
# Container states a pod does not leave by waiting.
_STUCK = frozenset(
    {
        "CrashLoopBackOff",
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "CreateContainerConfigError",
        "CreateContainerError",
    }
)
_REASON_MAX = 400
# How long a new RayCluster may go without any word from the operator before raylab says
# so. A running operator writes a status within a second or two (a few under load);
# after this long it is down or not watching the namespace, and the user should know
# why nothing happens rather than wait out the whole `up` timeout.
OPERATOR_GRACE_S = 30.0
OPERATOR_SILENT = (
    f"the KubeRay operator has not picked this cluster up for {OPERATOR_GRACE_S:.0f} s; "
    "is it running? An admin can check the ray-operator deployment"
)


@dataclass(frozen=True)
class Status:
    phase: Phase
    reason: str
    head_ready: bool
    workers_ready: int
    workers_desired: int


def cluster_info(
    obj: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[Mapping[str, Any]] = (),
    *,
    in_cluster: bool = False,
    now: float | None = None,
    queue: QueueInfo | None = None,
) -> ClusterInfo:
    """ClusterInfo of one RayCluster; `pods` are its pods, `warnings` its Warning events,
    `queue` its place in Kueue's queue (kueue.queue_info) when Kueue holds it.

    `now` (epoch seconds, default the clock) dates the object's age."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    labels = meta.get("labels") or {}
    namespace = str(meta.get("namespace") or "")
    name = str(meta.get("name") or "")
    status = derive_status(obj, pods, warnings, now=now, queue=queue)
    endpoints = Endpoints()
    if status.head_ready:
        # The head Service KubeRay makes; from outside the cluster it needs a port-forward
        # (KubeRayBackend.client_address), but the name is still where the cluster is.
        host = f"{name}-head-svc.{namespace}.svc"
        endpoints = Endpoints(
            client=f"ray://{host}:{CLIENT_PORT}",
            dashboard=f"http://{host}:{DASHBOARD_PORT}",
            serve=f"http://{host}:{SERVE_PORT}",
            metrics=f"http://{host}:{METRICS_PORT}",
        )
    idle = idle_from_annotation(annotations.get(IDLE_ANNOTATION))
    reason = status.reason
    if status.phase == Phase.SUSPENDED and idle.suspended_at is not None:
        # The culler's word on why, and Kueue's on where it stands (out of its queue).
        _, queued, where = reason.partition(", out of Kueue queue ")
        reason = suspension_reason(idle) + (f", out of Kueue queue {where}" if queued else "")
    return ClusterInfo(
        name=name,
        owner=str(annotations.get(OWNER_ANNOTATION) or labels.get(OWNER_LABEL) or ""),
        backend=BACKEND,
        phase=status.phase,
        spec=spec_of(obj),
        reason=reason,
        head_ready=status.head_ready,
        workers_ready=status.workers_ready,
        workers_desired=status.workers_desired,
        created=_timestamp(meta.get("creationTimestamp")),
        endpoints=endpoints,
        namespace=namespace or None,
        ray_version=(obj.get("spec") or {}).get("rayVersion") or None,
        python_version=annotations.get(PYTHON_ANNOTATION) or None,
        logical_gpus=False,
        environment=ClusterEnvironment.from_annotation(annotations.get(ENVIRONMENT_ANNOTATION)),
        uid=str(meta.get("uid") or ""),
        idle=idle,
        cell_at=finite_time(annotations.get(CELL_ANNOTATION)),
        standby_until=finite_time(annotations.get(STANDBY_ANNOTATION)),
        max_gpus=most_gpus(obj),
        queue=queue,
    )


def derive_status(
    obj: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]] = (),
    warnings: Sequence[Mapping[str, Any]] = (),
    *,
    now: float | None = None,
    queue: QueueInfo | None = None,
) -> Status:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    desired = worker_replicas(obj)
    live = [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]
    heads = [p for p in live if _node_type(p) == "head"]
    workers = [p for p in live if _node_type(p) == "worker"]
    ready = sum(1 for p in workers if pod_ready(p))

    def result(phase: Phase, reason: str = "", head_ready: bool = False) -> Status:
        return Status(phase, _clip(reason), head_ready, ready, desired)

    if meta.get("deletionTimestamp"):
        return result(Phase.DELETING, "deleting its pods and services")
    rejected = _rejection(meta, status, warnings)
    if rejected:
        return result(Phase.FAILED, f"KubeRay refused the cluster: {rejected}")
    queued = _queued(queue, spec, conditions)
    if queued is not None:
        return result(*queued)
    if _true(conditions, "RayClusterSuspended"):
        if spec.get("suspend"):
            return result(Phase.SUSPENDED, "suspended: no pods running")
        return result(Phase.STARTING, "resuming")
    if spec.get("suspend") or _true(conditions, "RayClusterSuspending"):
        return result(Phase.SUSPENDED, "suspending: stopping its pods")

    head_ready = _true(conditions, "HeadPodReady") and any(pod_ready(p) for p in heads)
    failure = conditions.get("ReplicaFailure")
    if failure and failure.get("status") == "True":
        kind, message = failure.get("reason") or "ReplicaFailure", failure.get("message") or ""
        why = message if message.startswith(kind) else f"{kind}: {message}"
        # Workers that cannot be created leave a usable head; a head that cannot is fatal.
        return result(Phase.DEGRADED if head_ready else Phase.FAILED, why, head_ready)

    if not head_ready:
        head = heads[0] if heads else None
        if head is None:
            deadline = operator_deadline(obj)
            if deadline is not None and (time.time() if now is None else now) >= deadline:
                return result(Phase.PENDING, OPERATOR_SILENT)
            return result(Phase.PENDING, "waiting for the KubeRay operator to create the head")
        waiting = unschedulable(head)
        if waiting:
            return result(Phase.PENDING, f"the head cannot be scheduled: {waiting}")
        stuck = stuck_reason(head)
        if stuck:
            return result(Phase.FAILED, f"head pod {_pod_name(head)}: {stuck}")
        restarted = restart_reason(head)
        if restarted:
            return result(Phase.STARTING, f"head pod {_pod_name(head)} restarted: {restarted}")
        if creating(head):
            return result(Phase.STARTING, f"{PULLING_REASON} of head pod {_pod_name(head)}")
        return result(Phase.STARTING, "starting the head")

    if ready >= desired:
        return result(Phase.READY, "", True)
    unplaced = [why for why in map(unschedulable, workers) if why]
    if unplaced:
        count = f"{len(unplaced)} of {desired} workers" if desired > 1 else "the worker"
        return result(Phase.PENDING, f"{count} cannot be scheduled: {unplaced[0]}", True)
    broken = [(p, stuck_reason(p)) for p in workers]
    failing = [(p, why) for p, why in broken if why]
    if failing:
        pod, why = failing[0]
        return result(Phase.DEGRADED, f"worker pod {_pod_name(pod)}: {why}", True)
    return result(Phase.STARTING, f"{ready}/{desired} workers ready", True)


def _queued(
    queue: QueueInfo | None, spec: Mapping[str, Any], conditions: Mapping[Any, Mapping[str, Any]]
) -> tuple[Phase, str] | None:
    """The phase of a cluster Kueue holds (None: admitted, or not Kueue's: as usual).

    Kueue suspends a queued cluster and unsuspends it once admitted, so while it waits
    `spec.suspend` is Kueue's, not the user's; the owner's own suspend deactivates the
    Workload instead (queueing.Queues.set_active).
    """
    if queue is None:
        return None
    stopped = _true(conditions, "RayClusterSuspended") and spec.get("suspend")
    if queue.state == "Inactive":
        if stopped:
            return Phase.SUSPENDED, f"suspended: no pods running, out of Kueue queue {queue.name}"
        return Phase.SUSPENDED, "suspending: stopping its pods"
    if queue.state == "Admitted":
        if spec.get("suspend"):
            return Phase.STARTING, f"admitted by Kueue ({queue.cluster_queue or queue.name})"
        return None
    place = queue.place()
    if queue.position is None and queue.message:
        place = f"{place}: {queue.message}"
    if queue.preempted:
        why = f"preempted by Kueue ({queue.preempted}); back in the queue: {place}"
        return Phase.QUEUED, why if stopped else f"preempted by Kueue: stopping its pods ({why})"
    return Phase.QUEUED, place


def operator_deadline(obj: Mapping[str, Any]) -> float | None:
    """When (epoch seconds) a cluster the operator has not touched yet gets the hint that
    the operator is silent; None once the operator has written a status for it.

    No event marks that moment, so a watch re-derives the cluster then (kuberay.watch).
    """
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    if meta.get("deletionTimestamp") or status.get("observedGeneration") is not None:
        return None
    return _timestamp(meta.get("creationTimestamp")) + OPERATOR_GRACE_S


def worker_replicas(obj: Mapping[str, Any]) -> int:
    """Desired workers as the object asks now (after scale, before the operator acts)."""
    return sum(g.pods for g in worker_groups(obj))


def worker_group_index(obj: Mapping[str, Any]) -> int | None:
    groups = (obj.get("spec") or {}).get("workerGroupSpecs") or []
    for i, group in enumerate(groups):
        if group.get("groupName") == WORKER_GROUP:
            return i
    return 0 if groups else None


def spec_of(obj: Mapping[str, Any]) -> ClusterSpec:
    """The ClusterSpec of a RayCluster: its workers, GPUs and autoscaling range as the
    object itself asks (resources.py), so that a `kubectl scale`, the autoscaler or an
    edited annotation shows as what will run; the rest (GPU type, image, idle limits)
    from the annotation raylab wrote, else read off the object."""
    meta = obj.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    groups = worker_groups(obj)
    autoscaling = bool((obj.get("spec") or {}).get("enableInTreeAutoscaling"))
    counts: dict[str, Any] = {
        "workers": sum(g.pods for g in groups),
        "gpus": sum(g.gpus * g.pods for g in groups),
        "min_workers": sum(g.least for g in groups) if autoscaling else None,
        "max_workers": sum(g.most for g in groups) if autoscaling else None,
    }
    try:
        spec = ClusterSpec(**json.loads(annotations[SPEC_ANNOTATION]))
    except (KeyError, TypeError, ValueError):
        spec = _spec_from_object(obj)
    return replace(spec, name=str(meta.get("name") or spec.name), **counts)


def _spec_from_object(obj: Mapping[str, Any]) -> ClusterSpec:
    """What the annotation would say, for a RayCluster without a readable one."""
    meta = obj.get("metadata") or {}
    groups = (obj.get("spec") or {}).get("workerGroupSpecs") or [{}]
    containers = ((groups[0].get("template") or {}).get("spec") or {}).get("containers") or [{}]
    limits = (containers[0].get("resources") or {}).get("limits") or {}
    return ClusterSpec(
        name=str(meta.get("name") or ""),
        gpus=0,
        gpu_type=str((meta.get("labels") or {}).get(GPU_TYPE_LABEL) or "cpu"),
        workers=0,
        cpus=str(limits.get("cpu") or "1"),
        memory=str(limits.get("memory") or "1Gi"),
    )


def pod_ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def unschedulable(pod: Mapping[str, Any]) -> str:
    """The scheduler's message for a pod it could not place, else ''."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if (
            c.get("type") == "PodScheduled"
            and c.get("status") == "False"
            and c.get("reason") == "Unschedulable"
        ):
            return str(c.get("message") or "Unschedulable")
    return ""


def creating(pod: Mapping[str, Any]) -> bool:
    """A scheduled pod whose containers are still being created: its image is being
    pulled (the kubelet says ContainerCreating, or PodInitializing for init containers)."""
    status = pod.get("status") or {}
    scheduled = any(c.get("type") == "PodScheduled" and c.get("status") == "True"
                    for c in status.get("conditions") or [])  # fmt: skip
    waiting = [
        ((cs.get("state") or {}).get("waiting") or {}).get("reason")
        for cs in [*(status.get("initContainerStatuses") or []),
                   *(status.get("containerStatuses") or [])]
    ]  # fmt: skip
    return scheduled and any(w in ("ContainerCreating", "PodInitializing") for w in waiting)


def stuck_reason(pod: Mapping[str, Any]) -> str:
    """'ImagePullBackOff: ...' for a container that will not start by itself, else ''."""
    status = pod.get("status") or {}
    for cs in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in _STUCK:
            crashed = (cs.get("lastState") or {}).get("terminated") or {}
            if waiting["reason"] == "CrashLoopBackOff" and crashed:
                # What the user needs is why it crashed, not the back-off's timing.
                return f"CrashLoopBackOff: {_crash(str(cs.get('name') or 'container'), crashed)}"
            message = waiting.get("message") or ""
            return f"{waiting['reason']}: {message}".rstrip(": ")
    if status.get("phase") == "Failed":
        return f"pod failed: {status.get('reason') or ''} {status.get('message') or ''}".strip()
    return ""


def restart_reason(pod: Mapping[str, Any]) -> str:
    """'ray-head exited with 1 (Error): <line> (restart 2)' for a pod whose container
    died and is running again (not Ready yet), else ''."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        crashed = (cs.get("lastState") or {}).get("terminated") or {}
        if crashed and not cs.get("ready"):
            name = str(cs.get("name") or "container")
            return f"{_crash(name, crashed)} (restart {cs.get('restartCount') or 1})"
    return ""


def _crash(container: str, terminated: Mapping[str, Any]) -> str:
    """'ray-head exited with 1 (Error): <its last log line>'."""
    text = f"{container} exited with {terminated.get('exitCode')} ({terminated.get('reason')})"
    if terminated.get("reason") == "OOMKilled":
        return f"{text}: it needs more memory than its limit"
    lines = [line for line in str(terminated.get("message") or "").splitlines() if line.strip()]
    return f"{text}: {lines[-1].strip()}" if lines else text


def is_validation_warning(event: Mapping[str, Any]) -> bool:
    return event.get("type") == "Warning" and event.get("reason") in VALIDATION_REASONS


def _rejection(
    meta: Mapping[str, Any], status: Mapping[str, Any], warnings: Iterable[Mapping[str, Any]]
) -> str:
    """The operator's validation message, while it has not accepted this generation.

    A refused object never gets a status, so observedGeneration stays behind; once a fix
    is accepted, old warning events (kept for an hour) stop counting.
    """
    observed = status.get("observedGeneration")
    if observed is not None and observed >= (meta.get("generation") or 0):
        return ""
    refusals = [e for e in warnings if is_validation_warning(e)]
    if not refusals:
        return ""
    latest = max(refusals, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return str(latest.get("message") or latest.get("reason"))


def _true(conditions: Mapping[Any, Mapping[str, Any]], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def _node_type(pod: Mapping[str, Any]) -> str:
    return str(((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/node-type") or "")


def _pod_name(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("name") or "?")


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _REASON_MAX else text[: _REASON_MAX - 1] + "…"


def _timestamp(value: object) -> float:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return time.time()  # not written yet: a brand-new object
