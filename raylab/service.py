"""Per-user operations on a backend: ownership, quotas, naming, waiting.

Shared by the magics, the CLI and the server extension, so every door applies the same
rules. A cluster another user owns is reported as not found, never as forbidden, so
names of other users' clusters do not leak.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from .backends.base import Backend
from .config import Settings
from .errors import (
    BackendUnavailable,
    ClusterFailed,
    Conflict,
    Forbidden,
    NotFound,
    QuotaExceeded,
    RaylabError,
    SpecError,
    WaitTimeout,
)
from .identity import may_see
from .model import (
    RUNNING_PHASES,
    Capacity,
    ClusterEnvironment,
    ClusterInfo,
    IdleState,
    Phase,
    Usage,
)
from .request_fields import whole_number
from .serving.model import ServeApps
from .spec import (
    MAX_WORKERS,
    ClusterSpec,
    generate_name,
    requested_gpus,
    validate_name,
)

# How long `wait` takes a refusal for a restarting API server's (see there).
REFUSAL_GRACE_S = 30.0


@dataclass(frozen=True)
class QuotaUse:
    """What a user's clusters take of their quota, and what is left: the one count that
    `up` checks and the dialog shows."""

    max_gpus_per_user: int
    max_clusters_per_user: int
    max_workers_per_cluster: int
    gpus_used: int
    clusters_used: int

    @property
    def gpus_left(self) -> int:
        return max(0, self.max_gpus_per_user - self.gpus_used)

    @property
    def clusters_left(self) -> int:
        return max(0, self.max_clusters_per_user - self.clusters_used)

    def to_json(self) -> dict[str, int]:
        return {**asdict(self), "gpus_left": self.gpus_left, "clusters_left": self.clusters_left}


def quota_use(settings: Settings, mine: Iterable[ClusterInfo]) -> QuotaUse:
    """`mine`: the user's clusters (from the backend, or a server's cache)."""
    clusters = list(mine)
    o = settings.options
    return QuotaUse(
        max_gpus_per_user=o.max_gpus_per_user,
        max_clusters_per_user=o.max_clusters_per_user,
        max_workers_per_cluster=o.max_workers_per_cluster,
        gpus_used=sum(c.quota_gpus for c in clusters),
        clusters_used=len(clusters),
    )


class WaitView(Protocol):
    """What `ClusterService.wait` keeps current: the notebook card or the terminal lines."""

    def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None: ...


class ClusterService:
    def __init__(
        self,
        backend: Backend,
        settings: Settings,
        user: str,
        *,
        admin: bool = False,
        program: str = "raylab",
    ) -> None:
        """`program`: what the caller's user types before a verb (`%raycluster` in a
        notebook, `raylab` in a shell), for the hints in the service's messages."""
        self.backend = backend
        self.settings = settings
        self.user = user
        self.admin = admin
        self.program = program

    def _verb(self, line: str) -> str:
        return f"`{self.program} {line}`"

    # --- reads --------------------------------------------------------------------

    def with_gpu_use(self, clusters: Iterable[ClusterInfo]) -> list[ClusterInfo]:
        """The clusters with their GPUs' use read now (running clusters with GPUs: one
        dashboard request each, in parallel), for `status` and `list`."""
        from concurrent.futures import ThreadPoolExecutor

        from .culler.activity import ActivityReader

        clusters = list(clusters)
        todo = [c for c in clusters if c.quota_gpus and c.head_ready
                and c.phase in RUNNING_PHASES]  # fmt: skip
        if not todo:
            return clusters
        options = self.settings.options
        reader = ActivityReader(self.backend, 3.0, options.culler_dashboard_url)
        with ThreadPoolExecutor(min(8, len(todo))) as pool:
            read = pool.map(lambda c: reader.read_gpu_use(c, options.gpu_busy_percent), todo)
            uses = dict(zip((c.uid or c.name for c in todo), read, strict=True))
        return [replace(c, gpu_use=uses.get(c.uid or c.name, c.gpu_use)) for c in clusters]

    def serve_apps(self, info: ClusterInfo) -> ServeApps:
        """Its Ray Serve apps, read now from its dashboard (one request)."""
        from .culler.activity import ActivityReader

        if info.phase not in RUNNING_PHASES or not info.head_ready:
            return ServeApps("none", time.time(), why=f"the cluster is {info.phase}")
        options = self.settings.options
        return ActivityReader(self.backend, 5.0, options.culler_dashboard_url).read_serve(info)

    def list(self, *, everyone: bool = False) -> list[ClusterInfo]:
        if everyone and self.admin:
            return self.backend.clusters()
        return self.backend.clusters(owner=self.user)

    def get(self, name: str, *, namespace: str | None = None) -> ClusterInfo:
        """`namespace`: another user's namespace, which only an admin's backend watches
        (None: the backend's own)."""
        validate_name(name)
        info = self.backend.get(name, namespace=namespace)
        if info is None or not may_see(info, self.user, self.admin):
            where = f" in namespace {namespace!r}" if namespace else ""
            raise NotFound(
                f"no cluster named {name!r}{where}",
                detail=f"{self._verb('list')} shows your clusters",
            )
        return info

    def quota(self) -> QuotaUse:
        return quota_use(self.settings, self.backend.clusters(owner=self.user))

    def capacity(self, request: Mapping[str, Any]) -> Capacity | None:
        """What a cluster asked for by `request` (its gpus, gpu_type) would get now
        from the backend's queue; None where the backend queues nothing."""
        gpus, gpu_type = requested_gpus(request, self.settings.profiles)
        # Only KubeRay queues (through Kueue, where the admin set a local_queue); how the
        # GPUs split into workers does not change what the queue says.
        outlook: Callable[[str, int], Capacity | None] | None = getattr(
            self.backend, "capacity", None
        )
        return outlook(gpu_type, gpus) if outlook is not None else None

    def usage(
        self,
        since_seconds: float,
        *,
        everyone: bool = False,
        clusters: Iterable[ClusterInfo] | None = None,
    ) -> Usage:
        """GPU-hours of the last `since_seconds`: the user's own, or (an admin's, with
        `everyone`) every user's. `clusters`: every cluster there is, where the caller
        holds them already (the server's cache); else the backend lists them."""
        from .culler.ledger import cluster_hours, usage_rows
        from .culler.ledger_store import store_for

        everyone = everyone and self.admin
        until = time.time()
        since = until - since_seconds
        # Each cluster says whose it is: a ledger's word about it does not count. So every
        # cluster that exists is asked, not only the user's own.
        known = self.backend.clusters() if clusters is None else clusters
        owners = {c.uid: c.owner for c in known if c.uid}
        intervals = store_for(self.backend).load(None if everyone else self.user, owners)
        return Usage(
            since, until, usage_rows(intervals, since, until),
            cluster_hours(intervals, since, until),
            cluster_hours(intervals, since, until, "used"),
            cluster_hours(intervals, since, until, "measured"),
        )  # fmt: skip

    def logs(self, name: str, tail: int = 200, *, namespace: str | None = None) -> str:
        self.get(name, namespace=namespace)
        return self.backend.logs(name, tail, namespace=namespace)

    def auth_token(self, name: str) -> str | None:
        """The cluster's Ray token, for its owner only: with it, Ray runs any code as the
        owner, so an admin may manage the cluster but not connect to it."""
        info = self.get(name)
        if info.owner != self.user:
            raise Forbidden(
                f"only {info.owner}, who owns {name!r}, can connect to it",
                detail="connecting runs code as the cluster's owner; admins can list, "
                "scale, suspend and delete it",
            )
        return self.backend.auth_token(name)

    def auth_token_in_use(self, name: str) -> bool:
        """Whether Ray asks for a token on this cluster (anyone who may see it may know)."""
        self.get(name)
        try:
            return self.backend.auth_token(name) is not None
        except RaylabError:
            return True  # a token is expected, only it cannot be read

    # --- writes -------------------------------------------------------------------

    def create(
        self,
        request: Mapping[str, Any],
        environment: ClusterEnvironment | None = None,
        say: Callable[[str], None] | None = None,
    ) -> tuple[ClusterInfo, bool]:
        """Create the cluster, or return the caller's existing one of that name.

        Returns (cluster, created). Everything is validated and checked against quotas
        before anything is created. `environment` is what a new cluster remembers (an
        existing one keeps its own: the caller decides whether to change it). A request
        without a name claims the caller's standby of its shape, where there is one
        (raylab/standby); `say` gets a line about what was done with standbys.
        """
        from .standby import claim_standby, make_room

        say = say or (lambda _: None)
        spec = ClusterSpec.from_mapping(request, self.settings.profiles)
        if spec.autoscaling and not self.backend.autoscales:
            raise SpecError(
                "min_workers",
                f"the {self.backend.name} backend does not autoscale; give --workers N, or "
                "use --backend kuberay, whose autoscaler keeps between --min-workers and "
                "--max-workers",
            )
        self._check_priority(spec)
        # The quota check and the create are one step for this user, whoever else
        # (another tab, a CLI, a kernel) asks at the same moment.
        with self.backend.quota_lock(self.user):
            if request.get("name") is not None:
                existing = self.backend.get(spec.name)
                if existing is not None:
                    if existing.owner != self.user:
                        raise Conflict(
                            f"the name {spec.name!r} is taken by another user's cluster",
                            detail="choose another --name",
                        )
                    if existing.standby_until is not None:
                        claimed = self.backend.claim(spec.name, environment)
                        if claimed is not None:
                            return claimed, True
                    return existing, False
            else:
                claimed = claim_standby(self.backend, self.user, spec, environment, say)
                if claimed is not None:
                    return claimed, True
            try:
                self._check_quota(spec)
            except QuotaExceeded:
                if not make_room(self.backend, self.user, say):
                    raise
                self._check_quota(spec)
            for _ in range(5):
                try:
                    return self.backend.create(spec, self.user, environment), True
                except Conflict:
                    if request.get("name") is not None:
                        raise
                    spec = ClusterSpec(**{**spec.to_json(), "name": generate_name()})
        raise Conflict("could not find a free cluster name; pass --name")

    def create_standby(self, spec: ClusterSpec, until: float) -> ClusterInfo | None:
        """Make a standby of `spec`'s shape for this user, ending at `until` (epoch s), if
        their quota has room for it; None when it has not (a standby never takes the
        place of a cluster they may ask for)."""
        with self.backend.quota_lock(self.user):
            try:
                self._check_quota(spec)
            except QuotaExceeded:
                return None
            for _ in range(5):
                try:
                    return self.backend.create(spec, self.user, standby_until=until)
                except Conflict:
                    spec = ClusterSpec(**{**spec.to_json(), "name": generate_name()})
        raise Conflict("could not find a free cluster name for a standby")

    def delete(self, name: str, *, namespace: str | None = None) -> None:
        self.get(name, namespace=namespace)
        self.backend.delete(name, namespace=namespace)

    def scale(self, name: str, workers: object, *, namespace: str | None = None) -> ClusterInfo:
        info = self.get(name, namespace=namespace)
        workers = whole_number(workers, "workers", 0, MAX_WORKERS)
        spec = info.spec
        if spec.gpus and workers == 0:
            raise SpecError("workers", "a GPU cluster needs at least one worker")
        if spec.autoscaling and not (spec.min_workers or 0) <= workers <= (spec.max_workers or 0):
            raise SpecError(
                "workers",
                f"{workers} is outside the autoscaling range "
                f"{spec.min_workers}..{spec.max_workers}",
            )
        with self.backend.quota_lock(info.owner, namespace=namespace):
            self._check_quota(spec.with_workers(workers), replacing=info)
            return self.backend.scale(name, workers, namespace=namespace)

    def set_environment(
        self, name: str, environment: ClusterEnvironment, *, namespace: str | None = None
    ) -> ClusterInfo:
        info = self.get(name, namespace=namespace)
        if info.environment == environment:
            return info
        return self.backend.set_environment(name, environment, namespace=namespace)

    def set_suspended(
        self, name: str, suspended: bool, *, namespace: str | None = None
    ) -> ClusterInfo:
        self.get(name, namespace=namespace)
        return self.backend.set_suspended(name, suspended, namespace=namespace)

    def keep_running(self, name: str, *, namespace: str | None = None) -> ClusterInfo:
        """Restart the idle clock of a running cluster (the warning's Keep running)."""
        info = self.get(name, namespace=namespace)
        if info.phase in (Phase.SUSPENDED, Phase.DELETING):
            raise Conflict(
                f"cluster {name!r} is {info.phase}: nothing to keep running",
                detail=f"{self._verb('resume ' + name)} starts it again",
            )
        if info.idle != IdleState():
            self.backend.update_idle(name, IdleState(), namespace=namespace)
        return self.get(name, namespace=namespace)

    # --- waiting ------------------------------------------------------------------

    def wait(
        self,
        name: str,
        until: Callable[[ClusterInfo], bool],
        timeout: float,
        view: WaitView | None = None,
        interval: float = 0.2,
        wake: threading.Event | None = None,
    ) -> ClusterInfo:
        """Poll until `until(info)`; raise on Failed or after `timeout` seconds.
        `wake`, when set, ends the pause at once (what `until` waits for may be done);
        the wait clears it.

        The one loop of a wait: `view` gets each change, a tick every second (its clock)
        and a note while the backend is away. The cluster is left as it is on timeout:
        nothing is deleted on an error. A backend that cannot be reached for a while (an
        API server restart) is waited for too, within the same timeout; its error is
        raised if it is still away then.
        """
        deadline = time.monotonic() + timeout
        last: ClusterInfo | None = None
        refused_since: float | None = None
        away = False
        ticked = time.monotonic()
        while True:
            try:
                info = self.get(name)
            except BackendUnavailable as exc:
                refused_since = None
                if time.monotonic() >= deadline:
                    raise
                if view and not away:
                    view.update(note=f"{exc.message}; still waiting")
                away = True
                time.sleep(max(interval, 1.0))
                continue
            except Forbidden:
                # An API server going down or coming up refuses requests for a moment
                # (its RBAC caches are empty), and the cluster was just made or read: a
                # refusal is believed once it has lasted REFUSAL_GRACE_S.
                now = time.monotonic()
                refused_since = refused_since or now
                if now - refused_since >= REFUSAL_GRACE_S or now >= deadline:
                    raise
                time.sleep(max(interval, 1.0))
                continue
            refused_since = None
            if view and (last is None or info != last or away):
                view.update(info, note="" if away else None)
                ticked = time.monotonic()
            elif view and time.monotonic() - ticked >= 1.0:
                view.update()  # the clock ("Elapsed") moves on
                ticked = time.monotonic()
            away = False
            last = info
            if until(info):
                return info
            if info.phase == Phase.FAILED or (
                info.phase == Phase.DEGRADED and not self.backend.restarts_nodes
            ):
                # No sense waiting out the timeout for what cannot recover by itself.
                what = "failed" if info.phase == Phase.FAILED else "cannot become Ready"
                raise ClusterFailed(
                    f"cluster {name!r} {what}: {info.reason}",
                    detail=f"it was kept: {self._verb('logs ' + name)} shows its log; "
                    f"{self._verb('down ' + name)} removes it",
                )
            if time.monotonic() >= deadline:
                why = f": {info.reason}" if info.reason else ""
                kept = (
                    "it stays in the queue and starts when Kueue admits it"
                    if info.phase == Phase.QUEUED
                    else "it was kept"
                )
                raise WaitTimeout(
                    f"cluster {name!r} is still {info.phase} after {timeout:.0f} s{why}",
                    detail=f"{kept}; {self._verb('status ' + name)} to check again, "
                    f"{self._verb('down ' + name)} to delete it",
                )
            # A queue moves in minutes, and each look at it is several requests.
            pause = max(interval, 1.0) if info.phase == Phase.QUEUED else interval
            if wake is None:
                time.sleep(pause)
            elif wake.wait(pause):
                wake.clear()  # woken once: the pauses after it are whole again

    # --- rules --------------------------------------------------------------------

    def _check_priority(self, spec: ClusterSpec) -> None:
        """A priority orders Kueue's queue: only where clusters queue, and only one the
        admin lists (a higher one would preempt others' clusters)."""
        if spec.priority is None:
            return
        allowed = list(self.settings.options.priority_classes)
        if not self.backend.may_queue or not self.settings.local_queue(spec.gpu_type):
            raise SpecError(
                "priority",
                f"clusters of GPU type {spec.gpu_type!r} do not wait in a Kueue queue here, "
                "so a priority means nothing; leave out --priority",
            )
        if spec.priority not in allowed:
            choose = f"choose one of: {', '.join(allowed)}" if allowed else "your admin lists none"
            raise SpecError(
                "priority", f"{spec.priority!r} is not a priority you may ask for; {choose}"
            )

    def _check_quota(self, spec: ClusterSpec, replacing: ClusterInfo | None = None) -> None:
        """Call under the owner's quota_lock. An autoscaling cluster counts at its most
        workers; what the others hold is what the backend reads from the clusters
        themselves (ClusterInfo.quota_gpus)."""
        o = self.settings.options
        most = spec.most_workers
        if most > o.max_workers_per_cluster:
            upto = "up to " if spec.autoscaling else ""
            raise QuotaExceeded(
                f"{upto}{most} workers requested, the limit is {o.max_workers_per_cluster} "
                "per cluster",
                detail="ask your admin to raise max_workers_per_cluster",
                field="max_workers" if spec.autoscaling else "workers",
            )
        owner = replacing.owner if replacing else self.user
        mine = [c for c in self.backend.clusters(owner=owner) if c.name != spec.name]
        use = quota_use(self.settings, mine)
        if replacing is None and use.clusters_left < 1:
            raise QuotaExceeded(
                f"you have {len(mine)} clusters, the limit is {o.max_clusters_per_user}",
                detail=f"delete one with {self._verb('down NAME')}",
            )
        used = use.gpus_used
        wanted = spec.most_gpus
        if wanted > use.gpus_left:
            asked = (
                f"up to {wanted} GPUs (at --max-workers)" if spec.autoscaling else f"{wanted} GPUs"
            )
            raise QuotaExceeded(
                f"{asked} requested, quota is {o.max_gpus_per_user} and {used} are in use",
                detail="delete or scale down a cluster, or ask your admin",
                field="gpus",
            )
