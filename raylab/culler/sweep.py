"""One culler sweep over the clusters a watch sees: read activity, apply the rules, store.

The same `Culler` runs in the Jupyter server extension (its user's clusters), in
`raylab culler` as a JupyterHub service, and in a Deployment. It makes no request to
list clusters (the caller's watch holds them), one to three dashboard requests per running
cluster with a limit or with GPUs (activity.py), and writes only when a cluster's idle
state changes: idle since, warned, suspended, active again, unreadable. The GPU use it
reads on the way is kept in memory (`gpu_use`, with the last hour's history) and metered
into the ledger as used GPU-seconds beside the held ones.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace

from .. import metrics
from ..backends.base import Backend
from ..config import Settings
from ..errors import RaylabError
from ..model import (
    BUSY_PERCENT,
    CELL_STAMP_S,
    RUNNING_PHASES,
    ClusterInfo,
    GpuUse,
    IdleState,
)
from .activity import Activity, ActivityReader, Rule
from .gpu_use import UseHistory
from .ledger import Meter
from .ledger_store import store_for
from .rules import Action, Policy, decide, policy_for

log = logging.getLogger("raylab.culler")


@dataclass
class SweepReport:
    clusters: int = 0  # clusters looked at
    read: int = 0  # whose activity was read
    active: int = 0
    idle: int = 0
    unknown: int = 0
    writes: int = 0  # idle-state writes that succeeded (suspensions included)
    conflicts: int = 0  # writes refused: changed meanwhile
    warned: list[str] = field(default_factory=list)
    suspended: list[str] = field(default_factory=list)
    retired: list[str] = field(default_factory=list)  # standbys deleted at their end
    seconds: float = 0.0

    def add(self, other: SweepReport) -> None:
        """Count `other`'s sweep in this one (one line for several cullers' sweeps);
        the time is the caller's to set."""
        for f in fields(self):
            if f.name != "seconds":
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


def busy_percent(settings: Settings) -> float:
    """The percent at or above which a GPU counts as busy (`c.Raylab.gpu_busy_percent`,
    the default where it is out of range)."""
    busy = settings.options.gpu_busy_percent
    return busy if 0 < busy <= 100 else BUSY_PERCENT


class Culler:
    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        *,
        owner: str | None = None,
        clock: Callable[[], float] = time.time,
        reader: ActivityReader | None = None,
        meter: Meter | None = None,
        parallel: int = 16,
    ) -> None:
        o = settings.options
        self.backend = backend
        self.settings = settings
        self.owner = owner  # only this user's clusters (the server extension); None: all
        self.clock = clock
        self.reader = reader or ActivityReader(backend, address_template=o.culler_dashboard_url)
        self.meter = meter or Meter(
            store_for(backend),
            flush_s=o.usage_flush_seconds,
            retention_s=o.usage_retention_days * 86400,
            # A restart shorter than this (plus a sweep) is counted as running.
            max_gap_s=o.usage_flush_seconds + 2 * o.cull_interval_seconds,
        )
        self.parallel = max(1, parallel)
        self._unknown_types: set[str] = set()  # clusters already said to be of one
        self.history = UseHistory()
        self.gpu_use: dict[str, GpuUse] = {}  # the last sweep's readings, by cluster uid

    def sweep(self, clusters: Iterable[ClusterInfo]) -> SweepReport:
        started = time.monotonic()
        now = self.clock()
        mine = [c for c in clusters if self.owner is None or c.owner == self.owner]
        report = SweepReport(clusters=len(mine))
        # A standby is never idle-suspended (its end time bounds it): its end is kept here
        # too, for a standby whose own keeper has gone (a stopped server, KubeRay).
        ended = [c for c in mine if c.standby_until is not None and c.standby_until <= now]
        report.retired = [c.name for c in ended if self._retire(c)]
        mine = [c for c in mine if c.name not in report.retired]
        running = [c for c in mine if c.phase in RUNNING_PHASES and c.head_ready]
        todo = [(c, self._policy(c)) for c in running if c.standby_until is None]
        todo = [(c, p) for c, p in todo if p.limit_s > 0 or c.idle != IdleState() or c.quota_gpus]
        with ThreadPoolExecutor(min(self.parallel, max(1, len(todo)))) as pool:
            activities = list(pool.map(lambda cp: self._read(cp[0], cp[1].limit_s, now), todo))
        self._keep_gpu_use(mine, todo, activities)
        try:
            for (owner, gpu_type), seconds in self.meter.observe(mine, now, self.gpu_use).items():
                metrics.GPU_SECONDS.labels(owner, gpu_type).inc(seconds)
            for (owner, gpu_type), seconds in self.meter.used_added.items():
                metrics.USED_GPU_SECONDS.labels(owner, gpu_type).inc(seconds)
        except RaylabError as exc:  # the ledger is away: idle checks go on
            metrics.API_ERRORS.labels("culler", str(exc.status)).inc()
            log.warning("raylab culler: cannot record GPU-hours: %s", exc.message)
        report.read = sum(1 for c, p in todo if p.limit_s > 0)
        for (info, policy), activity in zip(todo, activities, strict=True):
            if policy.limit_s > 0:
                setattr(report, activity.state, getattr(report, activity.state) + 1)
            decision = decide(info.idle, activity, now, policy)
            if decision.action == Action.NONE:
                continue
            suspend = decision.action == Action.SUSPEND
            try:
                ok = self.backend.update_idle(
                    info.name,
                    decision.idle,
                    expected=info.idle,
                    suspend=suspend,
                    namespace=info.namespace,
                )
            except RaylabError as exc:
                metrics.API_ERRORS.labels("culler", str(exc.status)).inc()
                log.warning("raylab culler: cannot update %s: %s", info.name, exc.message)
                continue
            if not ok:
                report.conflicts += 1
                metrics.UPDATE_CONFLICTS.inc()
                continue
            report.writes += 1
            if decision.action == Action.WARN:
                report.warned.append(info.name)
                metrics.IDLE_WARNINGS.labels(info.spec.gpu_type).inc()
                at = time.strftime("%H:%M", time.localtime(decision.idle.suspend_at))
                log.info("raylab culler: %s is idle; suspends at %s", info.name, at)
            elif suspend:
                report.suspended.append(info.name)
                metrics.IDLE_SUSPENSIONS.labels(info.spec.gpu_type).inc()
                idle_min = (now - (decision.idle.since or now)) / 60
                log.info("raylab culler: suspended %s (owner %s) after %.0f min idle",
                         info.name, info.owner, idle_min)  # fmt: skip
        report.seconds = time.monotonic() - started
        metrics.SWEEP_SECONDS.observe(report.seconds)
        return report

    def _retire(self, info: ClusterInfo) -> bool:
        try:
            retired = self.backend.retire_standby(info.name, namespace=info.namespace)
        except RaylabError as exc:
            log.warning("raylab culler: cannot delete standby %s: %s", info.name, exc.message)
            return False
        if retired:
            log.info("raylab culler: deleted standby %s (owner %s): unclaimed at its end",
                     info.name, info.owner)  # fmt: skip
        return retired

    def close(self) -> None:
        """Write what was metered (a stopping server or culler loses nothing)."""
        try:
            self.meter.flush(self.clock())
        except RaylabError as exc:
            log.warning("raylab culler: cannot record GPU-hours: %s", exc.message)

    def _policy(self, info: ClusterInfo) -> Policy:
        o = self.settings.options
        if self.settings.profiles.get(info.spec.gpu_type) is None:
            self._say_unknown_type(info)
        return policy_for(
            info, self.settings.profiles, o.idle_warning_minutes, o.activity_unknown_grace_minutes
        )

    def _say_unknown_type(self, info: ClusterInfo) -> None:
        """Once per cluster: a culler without the servers' config culls nothing silently."""
        if info.name in self._unknown_types:
            return
        self._unknown_types.add(info.name)
        known = ", ".join(sorted(self.settings.profiles.gpu_types)) or "none"
        log.warning(
            "raylab culler: %s is of GPU type %r, not one of this culler's (%s): only its "
            "own idle_suspend_minutes applies; give the culler the servers' c.Raylab "
            "(docs/culler.md)",
            info.name, info.spec.gpu_type, known,
        )  # fmt: skip

    def _keep_gpu_use(
        self,
        mine: list[ClusterInfo],
        todo: list[tuple[ClusterInfo, Policy]],
        activities: list[Activity],
    ) -> None:
        uses: dict[str, GpuUse] = {}
        for (info, _), activity in zip(todo, activities, strict=True):
            if activity.gpu_use is not None and info.uid:
                uses[info.uid] = self.history.add(info.uid, activity.gpu_use)
        self.history.keep_only({c.uid for c in mine if c.uid})
        self.gpu_use = uses

    def with_gpu_use(self, clusters: Iterable[ClusterInfo]) -> list[ClusterInfo]:
        """The clusters with their GPU use as this culler last read it."""
        return [
            replace(c, gpu_use=self.gpu_use[c.uid])
            if c.uid in self.gpu_use and c.phase in RUNNING_PHASES
            else c
            for c in clusters
        ]

    def rule(self, info: ClusterInfo) -> Rule:
        """What counts as work on this cluster, as the admin configured it."""
        o = self.settings.options
        kernels = o.connected_kernel_is_work
        return Rule(
            busy_percent=busy_percent(self.settings),
            kernel_is_work="*" in kernels or info.spec.gpu_type in kernels,
            # A kernel stamps a running cell once a minute; a sweep may come just before.
            cell_window_s=CELL_STAMP_S + max(1.0, o.cull_interval_seconds) + 30.0,
        )

    def _read(self, info: ClusterInfo, limit_s: float, now: float) -> Activity:
        if limit_s <= 0 and not info.quota_gpus:
            return Activity("active", "idle suspension is off for this cluster")
        activity = self.reader.read(info, self.rule(info), now)
        if limit_s <= 0:  # read for its GPU use only
            return Activity("active", "idle suspension is off for this cluster",
                            activity.gpu_use)  # fmt: skip
        return activity
