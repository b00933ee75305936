"""ClusterInfo: the backend-neutral status every layer speaks (magics, CLI, REST, UI)."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict, dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from .serving.model import ServeApps
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


def finite_time(value: object) -> float | None:
    """An epoch time from stored JSON or an annotation; None for anything else."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value) if value > 0 else None
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


# Its head up and serving: where activity and GPU use are read, and a cluster can idle.
RUNNING_PHASES = frozenset({Phase.READY, Phase.DEGRADED})


@dataclass(frozen=True)
class Endpoints:
    client: str | None = None  # ray://host:port for Ray Client
    dashboard: str | None = None  # http://host:port of the Ray dashboard
    gcs: str | None = None  # host:port of the head's GCS, where a direct driver connects
    # Ray Serve's HTTP proxy, the cluster's own port (serving/defaults.py puts it there);
    # None for a cluster made before raylab chose one.
    serve: str | None = None
    # The head's Prometheus metrics (Serve's request counters: culler/serve_activity.py).
    metrics: str | None = None


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


def cluster_key(namespace: str | None, name: str) -> str:
    """`namespace/name`: a watch of several namespaces (an admin's server, a culler of
    every namespace) sees alice's and bob's clusters of one name. The local backend has
    no namespaces."""
    return f"{namespace}/{name}" if namespace else name


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
    # When a cell last ran in a kernel connected to it (epoch s; the kernel stamps it at
    # most once a minute while cells run): a running cell is work (culler/activity.py).
    cell_at: float | None = None
    # Its GPUs' use as last read (None: not read here). Never stored on the cluster:
    # whoever reads it (a culler, the server, a kernel's card) holds it.
    gpu_use: GpuUse | None = None
    # Its Ray Serve apps as last read (None: not read here); like gpu_use, never stored.
    serve: ServeApps | None = None
    # A standby cluster (raylab/standby): made before its owner asked, claimed by the next
    # `up` of its shape, deleted at this time (epoch s) if none does; None: a cluster a
    # user asked for (or a standby since claimed).
    standby_until: float | None = None

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
        out["gpu_use"] = self.gpu_use.to_json() if self.gpu_use is not None else None
        out["serve"] = self.serve.to_json() if self.serve is not None else None
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


def clock_text(epoch: float, now: float | None = None) -> str:
    """14:05 today, else Dec 01 14:05 (local time)."""
    when, today = time.localtime(epoch), time.localtime(now or time.time())
    same_day = when[:3] == today[:3]
    return time.strftime("%H:%M" if same_day else "%b %d %H:%M", when)


def duration_text(seconds: float) -> str:
    """How long, as the idle wording says it: 42 s, 50 min, 3 h 5 min."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3 * 3600:
        return f"{s // 60} min"
    return f"{s // 3600} h {s % 3600 // 60} min"


def suspension_reason(idle: IdleState, now: float | None = None) -> str:
    """'suspended after 60 min idle at 14:05' for a cluster the culler suspended ('' for
    one its owner suspended): what a suspended cluster's reason says in every door."""
    if idle.suspended_at is None:
        return ""
    after = duration_text(idle.suspended_at - (idle.since or idle.suspended_at))
    return f"suspended after {after} idle at {clock_text(idle.suspended_at, now)}"


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
    gpu_hours: float  # held: GPUs requested times hours running (what is billed)
    used_gpu_hours: float = 0.0  # busy: utilization integrated over time
    measured_gpu_hours: float = 0.0  # of the held hours, those whose use was read

    @property
    def used_share(self) -> float | None:
        """Used over held, where use was read (None: never measured)."""
        if self.measured_gpu_hours <= 0:
            return None
        return min(1.0, self.used_gpu_hours / self.measured_gpu_hours)


@dataclass(frozen=True)
class Usage:
    """GPU-hours within [since, until]: per user and GPU type, and per cluster uid
    (`clusters` held; `clusters_used`, `clusters_measured` where use was read)."""

    since: float
    until: float
    users: list[UsageRow]
    clusters: dict[str, float]
    clusters_used: dict[str, float] = field(default_factory=dict)
    clusters_measured: dict[str, float] = field(default_factory=dict)

    @property
    def gpu_hours(self) -> float:
        return sum(r.gpu_hours for r in self.users)

    @property
    def used_gpu_hours(self) -> float:
        return sum(r.used_gpu_hours for r in self.users)

    @property
    def measured_gpu_hours(self) -> float:
        return sum(r.measured_gpu_hours for r in self.users)

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "until": self.until,
            "users": [{**asdict(r), "used_share": r.used_share} for r in self.users],
            "clusters": self.clusters,
            "clusters_used": self.clusters_used,
            "clusters_measured": self.clusters_measured,
            "gpu_hours": self.gpu_hours,
            "used_gpu_hours": self.used_gpu_hours,
            "measured_gpu_hours": self.measured_gpu_hours,
        }


GpuUseState = Literal["measured", "not_measured", "unknown"]
# A kernel stamps `cell_at` at most this often while cells run (kernel/cell_stamps.py);
# the cullers count a stamp that recent, plus a sweep, as a running cell.
CELL_STAMP_S = 60.0
_GPU_USE_STATES = ("measured", "not_measured", "unknown")
BUSY_PERCENT = 5.0  # c.Raylab.gpu_busy_percent's default: a GPU at or above it is busy


@dataclass(frozen=True)
class GpuReading:
    """One GPU as Ray's reporter agent read it through NVML (its dashboard serves it)."""

    node: str  # the node's IP, as the dashboard names it
    index: int
    name: str
    utilization: float  # percent, 0 to 100
    memory_used_mib: float
    memory_total_mib: float


@dataclass(frozen=True)
class GpuUse:
    """How a cluster's GPUs are used, read at `at` (culler/gpu_use.py).

    `measured`: the nodes reported GPU figures. `not_measured`: the dashboard answered but
    no node reports a GPU (logical GPUs, no NVML): no evidence either way. `unknown`: the
    dashboard could not be read, or answered figures that cannot be true. `why` says
    which, for the two that are not measured. Held GPUs never stand in for used ones.
    """

    state: GpuUseState
    at: float
    why: str = ""
    gpus: tuple[GpuReading, ...] = ()
    threshold: float = BUSY_PERCENT  # percent at or above which a GPU counts as busy
    # (epoch seconds, mean utilization %) of the last hour's measured readings, oldest first.
    history: tuple[tuple[float, float], ...] = ()

    @property
    def measured(self) -> bool:
        return self.state == "measured" and bool(self.gpus)

    @property
    def busy(self) -> int:
        return sum(1 for g in self.gpus if g.utilization >= self.threshold)

    @property
    def utilization(self) -> float:
        """Mean utilization of its GPUs, in percent (0 with none: check `measured`)."""
        return sum(g.utilization for g in self.gpus) / len(self.gpus) if self.gpus else 0.0

    @property
    def busy_gpus(self) -> float:
        """GPUs' worth of work now: the sum of utilizations as fractions (2 GPUs at 50 %
        are 1.0). Integrated over time, it is the ledger's used GPU-seconds."""
        return sum(min(100.0, g.utilization) for g in self.gpus) / 100.0

    @classmethod
    def from_json(cls, data: object) -> GpuUse | None:
        """What `to_json` wrote (a REST client's copy); None for anything else."""
        if not isinstance(data, dict) or data.get("state") not in _GPU_USE_STATES:
            return None
        try:
            gpus = tuple(
                GpuReading(
                    str(g["node"]),
                    int(g["index"]),
                    str(g["name"]),
                    float(g["utilization"]),
                    float(g["memory_used_mib"]),
                    float(g["memory_total_mib"]),
                )
                for g in data.get("gpus") or []
            )
            history = tuple((float(t), float(u)) for t, u in data.get("history") or [])
            return cls(data["state"], float(data["at"]), str(data.get("why") or ""), gpus,
                       float(data.get("threshold", BUSY_PERCENT)), history)  # fmt: skip
        except (KeyError, TypeError, ValueError):
            return None

    def with_history(self, history: tuple[tuple[float, float], ...]) -> GpuUse:
        return replace(self, history=history)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "at": self.at,
            "why": self.why,
            "threshold": self.threshold,
            "gpus": [asdict(g) for g in self.gpus],
            "count": len(self.gpus),
            "busy": self.busy,
            "utilization": round(self.utilization, 1),
            "memory_used_mib": sum(g.memory_used_mib for g in self.gpus),
            "memory_total_mib": sum(g.memory_total_mib for g in self.gpus),
            "history": [[round(t, 3), round(u, 1)] for t, u in self.history],
        }
