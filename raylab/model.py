"""ClusterInfo: the backend-neutral status every layer speaks (magics, CLI, REST, UI)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .spec import ClusterSpec
from .sync.environment import ClusterEnvironment


class Phase(StrEnum):
    QUEUED = "Queued"  # waiting its turn in a Kueue queue; `queue` says where
    PENDING = "Pending"  # accepted, nothing running yet (e.g. waiting for GPU nodes)
    STARTING = "Starting"  # head or workers coming up
    READY = "Ready"  # head ready and every desired worker ready
    DEGRADED = "Degraded"  # head ready, some workers missing or dead
    SUSPENDED = "Suspended"  # stopped on request; comes back with resume
    FAILED = "Failed"  # the head is gone or cannot start; `reason` says why
    DELETING = "Deleting"

    @property
    def settled(self) -> bool:
        """True once waiting for readiness can stop."""
        return self in (Phase.READY, Phase.FAILED, Phase.SUSPENDED)


@dataclass(frozen=True)
class Endpoints:
    client: str | None = None  # ray://host:port for Ray Client
    dashboard: str | None = None  # http://host:port of the Ray dashboard
    gcs: str | None = None  # host:port of the head's GCS, where a direct driver connects


@dataclass(frozen=True)
class IdleState:
    """What the culler keeps on the cluster itself (a KubeRay annotation, the local
    cluster.json), so that every door shows the same. Times are epoch seconds.

    Empty while the cluster is in use; `resume`, `suspend` and Keep running empty it.
    """

    since: float | None = None  # seen idle (no driver, no live actor) since
    suspend_at: float | None = None  # warned: suspended then, unless used or kept
    unknown_since: float | None = None  # its activity could not be read since
    unknown_reason: str = ""
    suspended_at: float | None = None  # suspended for idleness then (with `since`: how long)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v not in (None, "")}

    @classmethod
    def from_json(cls, data: object) -> IdleState:
        """Lenient: anything unreadable counts as empty (the culler then starts over)."""
        if not isinstance(data, dict):
            return cls()

        def number(key: str) -> float | None:
            value = data.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                return float(value)
            return None

        reason = data.get("unknown_reason")
        return cls(
            since=number("since"),
            suspend_at=number("suspend_at"),
            unknown_since=number("unknown_since"),
            unknown_reason=reason if isinstance(reason, str) else "",
            suspended_at=number("suspended_at"),
        )


@dataclass(frozen=True)
class QueueInfo:
    """Where a cluster stands in its Kueue queue (KubeRay with `c.Raylab.local_queue`).

    Positions and figures are None where Kubernetes would not tell this user (the
    visibility API or the ClusterQueue not readable): the text then says less.
    """

    name: str  # the LocalQueue
    state: str = "Queued"  # Queued | Admitted | Inactive (suspended by its owner)
    cluster_queue: str = ""
    priority: str = ""  # the WorkloadPriorityClass asked for
    position: int | None = None  # 1 = next in its ClusterQueue
    ahead: int | None = None  # clusters ahead of it
    ahead_gpus: int | None = None  # GPUs those ask for (None: not all readable)
    gpus_in_use: int | None = None  # of the ClusterQueue's GPUs
    gpus_quota: int | None = None  # the ClusterQueue's nominal GPUs
    preempted: str = ""  # why Kueue took it off its GPUs last (empty: never)
    message: str = ""  # Kueue's own word on why it waits

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> QueueInfo | None:
        if not isinstance(data, dict) or not isinstance(data.get("name"), str):
            return None
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)

    def place(self) -> str:
        """'2nd in gpus (8 GPUs ahead of you; 16 in use of 16)', as far as it is known."""
        where = self.cluster_queue or self.name
        if self.position is None:
            head = f"waiting in {where}"
        else:
            head = f"{ordinal(self.position)} in {where}"
        details = []
        if self.ahead_gpus is not None and self.ahead:
            details.append(f"{self.ahead_gpus} GPUs ahead of you")
        elif self.ahead:
            details.append(f"{self.ahead} cluster{'s' if self.ahead != 1 else ''} ahead of you")
        if self.gpus_in_use is not None and self.gpus_quota is not None:
            details.append(f"{self.gpus_in_use} in use of {self.gpus_quota}")
        return f"{head} ({'; '.join(details)})" if details else head


@dataclass(frozen=True)
class Capacity:
    """What a cluster of `gpus` × `gpu_type` would get now, before it is asked for: free
    now, or how much waits ahead of it in its Kueue queue. None figures: not readable."""

    gpu_type: str
    gpus: int
    queue: str = ""  # the LocalQueue it would wait in ('' none: no queue)
    cluster_queue: str = ""
    gpus_in_use: int | None = None
    gpus_quota: int | None = None
    waiting: int | None = None  # clusters waiting in the ClusterQueue
    waiting_gpus: int | None = None  # the GPUs they ask for (None: not all readable)

    @property
    def free_now(self) -> bool | None:
        if self.gpus_in_use is None or self.gpus_quota is None or self.waiting is None:
            return None
        return self.waiting == 0 and self.gpus_quota - self.gpus_in_use >= self.gpus

    def text(self) -> str:
        """'4 × a100: free now (8 in use of 16 in gpus)', or 'queued: …'."""
        asked = f"{self.gpus} × {self.gpu_type}" if self.gpus else f"a {self.gpu_type} cluster"
        if not self.queue:
            return f"{asked}: no queue here; it starts as soon as Kubernetes has room"
        where = self.cluster_queue or self.queue
        usage = ""
        if self.gpus_in_use is not None and self.gpus_quota is not None:
            usage = f"{self.gpus_in_use} in use of {self.gpus_quota} in {where}"
        if self.free_now:
            return f"{asked}: free now ({usage})"
        details = []
        if self.waiting:
            if self.waiting_gpus is not None:
                details.append(f"{self.waiting_gpus} GPUs ahead")
            plural = "s" if self.waiting != 1 else ""
            details.append(f"{self.waiting} cluster{plural} waiting")
        elif self.free_now is False and self.gpus_quota is not None:
            if self.gpus > self.gpus_quota:
                return (
                    f"{asked}: more than {where}'s whole quota of {self.gpus_quota} GPUs; "
                    "it would wait for ever (ask for fewer, or ask your admin)"
                )
            details.append("waits until GPUs in use are freed")
        if usage:
            details.append(usage)
        if not details:
            return f"{asked}: waits in queue {where} (how long is not readable here)"
        return f"{asked}: queued: {'; '.join(details)}"

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "free_now": self.free_now, "text": self.text()}


def ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    owner: str
    backend: str
    phase: Phase
    spec: ClusterSpec
    reason: str = ""
    head_ready: bool = False  # the head accepts Ray Client connections
    workers_ready: int = 0
    workers_desired: int = 0
    created: float = field(default_factory=time.time)
    endpoints: Endpoints = field(default_factory=Endpoints)
    namespace: str | None = None
    ray_version: str | None = None
    python_version: str | None = None  # "3.11": the cluster's Python minor
    logical_gpus: bool = False  # GPUs declared to Ray without physical devices
    # The Ray environment connects apply (names only, no values); None: never set.
    environment: ClusterEnvironment | None = None
    # Idle suspension and GPU-hours (raylab/culler): the cluster's lasting identity (the
    # RayCluster's uid; a local cluster's own), and its idle state.
    uid: str = ""
    idle: IdleState = field(default_factory=IdleState)
    # The most GPUs its pods may ask for, as the backend reads it from what will really be
    # scheduled (KubeRay: every pod template at its most replicas), never from a record
    # the user can edit; None: the spec's own count (the local backend).
    max_gpus: int | None = None
    # Its place in a Kueue queue (KubeRay with a local_queue); None: not queued by Kueue.
    queue: QueueInfo | None = None

    @property
    def quota_gpus(self) -> int:
        """What the cluster counts against its owner's GPU quota."""
        return self.spec.most_gpus if self.max_gpus is None else self.max_gpus

    @property
    def gpus(self) -> int:
        return self.spec.gpus_per_worker * self.workers_desired

    @property
    def gpus_ready(self) -> int:
        return self.spec.gpus_per_worker * self.workers_ready

    def age(self, now: float | None = None) -> float:
        return max(0.0, (now or time.time()) - self.created)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["phase"] = str(self.phase)
        out["gpus"] = self.gpus
        out["gpu_type"] = self.spec.gpu_type
        return out


def format_age(seconds: float) -> str:
    """kubectl-style ages: 42s, 7m, 3h, 5d."""
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 2 * 3600:
        return f"{s // 60}m"
    if s < 2 * 86400:
        return f"{s // 3600}h"
    return f"{s // 86400}d"
