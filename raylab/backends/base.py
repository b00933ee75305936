"""The small interface every backend implements (local processes, KubeRay)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from ..model import ClusterEnvironment, ClusterInfo, IdleState
from ..spec import ClusterSpec

EventType = Literal["ADDED", "MODIFIED", "DELETED"]

# What a head that serves Ray Client needs in its environment (local nodes and KubeRay head
# pods alike). Ray Client's proxy forks a server per connecting client from a gRPC thread:
# - with gRPC's fork handlers on, the child now and then restarts gRPC threads and crashes
#   before exec (SIGSEGV), and that client waits 30 s to be told "Initialization failure".
#   The child only execs, so it needs no gRPC of its own.
# - the proxy gives that server 30 s to import Ray and listen, then fails the client
#   ("Proxy failed to Connect to backend"); a busy small machine can need more.
# - that server exits after 30 s with no client; when it took a minute to start, the
#   proxy's gRPC channel, backing off (1 s × 1.6 per try), can next look just after it
#   has gone, and the client fails the same way. It waits as long as the proxy does
#   (so it also lingers up to 5 minutes after its last client leaves).
CLIENT_SERVER_ENV = {
    "GRPC_ENABLE_FORK_SUPPORT": "0",
    "RAY_CLIENT_SERVER_CHECK_CHANNEL_TIMEOUT_S": "300",
    "TIMEOUT_FOR_SPECIFIC_SERVER_S": "300",
}


@dataclass(frozen=True)
class ClusterEvent:
    type: EventType
    cluster: ClusterInfo


class Backend(Protocol):
    """Operations on clusters. Ownership and quotas are the service's job, not the backend's.

    The per-cluster calls take the cluster's `namespace` (None: the backend's own), for an
    admin's backend that watches other users' namespaces too; the local backend has no
    namespaces and ignores it.
    """

    name: str
    # Whether a node that exited comes back by itself (KubeRay: the kubelet restarts its
    # pod). Where it does not, a Degraded cluster cannot become Ready without the user.
    restarts_nodes: bool
    # Whether it scales between --min-workers and --max-workers by itself (KubeRay's
    # autoscaler); where it does not, such a request is refused rather than ignored.
    autoscales: bool
    # Whether a direct driver here must first join the cluster as a node of its own
    # (kernel/joined_node.py): no raylet of the cluster runs where this process runs.
    driver_joins: bool
    # Whether its clusters may wait in a Kueue queue (where the admin names one for the
    # GPU type): only then do `capacity`, `--priority` and the dialog's outlook mean much.
    may_queue: bool
    # Whether its workers run as this machine's user and so can read the owner's files
    # (environment values go to them as a file, not through the cluster's KV store).
    workers_read_owner_files: bool

    @property
    def state_dir(self) -> Path | None:
        """The folder on this machine where it keeps its clusters' state (and the
        GPU-hours ledger beside them); None: it keeps them in Kubernetes objects."""
        ...

    def quota_lock(
        self, owner: str, *, namespace: str | None = None
    ) -> AbstractContextManager[None]:
        """Held while the service checks `owner`'s quota and then creates or scales, so
        that the check and the change are one step for every process that may write
        `owner`'s clusters at once (the server's requests, CLIs, kernels). Raises
        BackendUnavailable when it cannot be had in time."""
        ...

    def create(
        self,
        spec: ClusterSpec,
        owner: str,
        environment: ClusterEnvironment | None = None,
        *,
        standby_until: float | None = None,
    ) -> ClusterInfo:
        """Start creating; returns at once or after the cheap first step. Raises Conflict
        when the name is taken. `standby_until`: a standby, deleted then unless claimed."""
        ...

    def claim(
        self, name: str, environment: ClusterEnvironment | None, *, namespace: str | None = None
    ) -> ClusterInfo | None:
        """Make the standby `name` its owner's ordinary cluster, in one conditional write
        (of racing claims exactly one wins); None when it is no longer a standby."""
        ...

    def retire_standby(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete `name` only if it is still an unclaimed standby; False when it is not."""
        ...

    def set_environment(
        self, name: str, environment: ClusterEnvironment, *, namespace: str | None = None
    ) -> ClusterInfo:
        """Remember the Ray environment that connects to this cluster apply."""
        ...

    def get(self, name: str, *, namespace: str | None = None) -> ClusterInfo | None: ...

    def clusters(self, owner: str | None = None) -> list[ClusterInfo]:
        """Every cluster (or `owner`'s), newest state."""
        ...

    def delete(self, name: str, *, namespace: str | None = None) -> None: ...

    def scale(self, name: str, workers: int, *, namespace: str | None = None) -> ClusterInfo: ...

    def set_suspended(
        self, name: str, suspended: bool, *, namespace: str | None = None
    ) -> ClusterInfo:
        """Suspend or resume; either empties the cluster's idle state."""
        ...

    def update_idle(
        self,
        name: str,
        idle: IdleState,
        *,
        expected: IdleState | None = None,
        suspend: bool = False,
        namespace: str | None = None,
    ) -> bool:
        """Store the culler's idle state on the cluster if what is stored is still
        `expected` (None: unconditionally); with `suspend`, suspend it in the same write.
        False when the cluster changed meanwhile (nothing written) or is gone."""
        ...

    def mark_cell(self, name: str, at: float, *, namespace: str | None = None) -> None:
        """Record that a kernel connected to the cluster ran a cell at `at` (epoch
        seconds): `ClusterInfo.cell_at`, which the cullers count as work."""
        ...

    def logs(self, name: str, tail: int = 200, *, namespace: str | None = None) -> str: ...

    def auth_token(self, name: str) -> str | None:
        """The cluster's Ray token (None: a cluster made with token auth off). Only the
        service may hand it on, and only to the cluster's owner."""
        ...

    def watch(
        self, stop: threading.Event, on_health: Callable[[str | None], None] | None = None
    ) -> Iterator[ClusterEvent]:
        """Yield every change until `stop` is set; starts with ADDED for each cluster.

        A backend that rides out outages reports them through `on_health` (a message
        while unreachable, None once back) instead of ending the iteration."""
        ...

    def client_address(self, info: ClusterInfo) -> str | None:
        """Where this process reaches the cluster's Ray Client (may open a tunnel)."""
        ...

    def driver_address(self, info: ClusterInfo) -> str | None:
        """Where this process can be a direct Ray driver of the cluster (its GCS, which
        must reach back to this machine), or None: only through Ray Client."""
        ...

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        """Where this process reaches the cluster's dashboard (may open a tunnel)."""
        ...

    def serve_address(self, info: ClusterInfo) -> str | None:
        """Where this process reaches the cluster's Ray Serve proxy (may open a tunnel);
        None where the cluster has no Serve port."""
        ...

    def metrics_address(self, info: ClusterInfo) -> str | None:
        """Where this process reaches the head's Prometheus metrics (may open a tunnel)."""
        ...

    def lasting_dashboard_address(self, info: ClusterInfo) -> str | None:
        """Where any process here reaches the dashboard, for a shell to keep using after
        this process ends; None where only a tunnel of this process reaches it."""
        ...
