"""ClusterInfo: the backend-neutral status every layer speaks (magics, CLI, REST, UI)."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from .spec import ClusterSpec
from .sync.environment import ClusterEnvironment


class Phase(StrEnum):
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
