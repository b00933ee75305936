"""ClusterInfo: the backend-neutral status every layer speaks (magics, CLI, REST, UI)."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any

from .spec import ClusterSpec


@dataclass(frozen=True)
class ClusterEnvironment:
    """The Ray environment a cluster remembers, with no secret in it.

    It lives with the cluster (the local backend's cluster.json, a RayCluster annotation),
    so every kernel that connects, the sidebar's Connect and the export see the same one.
    It holds environment-variable *names* only: values stay in the owner's 0600 file
    (sync/values.py), so nothing the server reads, lists or serves can carry them.
    """

    # Absolute path of the folder shipped as Ray's working_dir (None: nothing synced).
    working_dir: str | None = None
    working_dir_bytes: int = 0  # what was shipped last time, after excludes
    working_dir_files: int = 0
    excludes: tuple[str, ...] = ()  # the user's --exclude patterns (gitignore syntax)
    pip: tuple[str, ...] = ()  # requirements Ray's pip installs on the workers (an index)
    wheels: tuple[str, ...] = ()  # local wheel files, unpacked and shipped as they are
    # Distributions installed in the kernel in development mode or from local files,
    # shipped as py_modules (their files, not an index name).
    local_packages: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()

    def with_changes(self, **changes: Any) -> ClusterEnvironment:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_annotation(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: object) -> ClusterEnvironment | None:
        """Read what a backend stored; None for nothing or for something unreadable
        (an older or hand-edited value is not worth failing a listing for)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                working_dir=_optional_str(data.get("working_dir")),
                working_dir_bytes=int(data.get("working_dir_bytes") or 0),
                working_dir_files=int(data.get("working_dir_files") or 0),
                excludes=_strings(data.get("excludes")),
                pip=_strings(data.get("pip")),
                wheels=_strings(data.get("wheels")),
                local_packages=_strings(data.get("local_packages")),
                env_names=_strings(data.get("env_names")),
            )
        except (TypeError, ValueError):
            return None

    @classmethod
    def from_annotation(cls, text: str | None) -> ClusterEnvironment | None:
        if not text:
            return None
        try:
            return cls.from_json(json.loads(text))
        except ValueError:
            return None


def _optional_str(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(value)
    return tuple(value)


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


def format_size(size: int) -> str:
    """1.5 KiB, 3.2 MiB: one decimal, rounded half up in integers (render.ts does the
    same, so the notebook's card and the sidebar's never differ in the last digit)."""
    if size < 1024:
        return f"{size} B"
    unit = 1024
    for name in ("KiB", "MiB", "GiB", "TiB"):
        tenths = (size * 20 + unit) // (2 * unit)  # size * 10 / unit, rounded half up
        if tenths < 10240 or name == "TiB":
            break
        unit *= 1024
    return f"{tenths // 10}.{tenths % 10} {name}"


@dataclass(frozen=True)
class UsageRow:
    """GPU-hours of one user and GPU type (the `usage` verb's and REST's rows)."""

    owner: str
    gpu_type: str
    clusters: int
    gpu_hours: float


@dataclass(frozen=True)
class Usage:
    """GPU-hours within [since, until]: per user and GPU type, and per cluster uid."""

    since: float
    until: float
    users: list[UsageRow]
    clusters: dict[str, float]

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.users)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "users": [asdict(r) for r in self.users],
            "clusters": self.clusters,
            "gpu_hours": self.gpu_hours,
        }
