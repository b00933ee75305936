"""What `up` does with its owner's standbys: claim one that serves the request, or give
them back when the quota has no room for the cluster asked for."""

from __future__ import annotations

from collections.abc import Callable

from ..backends.base import Backend
from ..model import ClusterEnvironment, ClusterInfo
from ..spec import ClusterSpec
from .shapes import same_shape, unusable

Say = Callable[[str], None]


def claim_standby(
    backend: Backend,
    owner: str,
    spec: ClusterSpec,
    environment: ClusterEnvironment | None,
    say: Say,
) -> ClusterInfo | None:
    """The owner's standby of `spec`'s shape, now theirs (call under the owner's quota
    lock); None when there is none to claim. One that cannot serve (stopped, too old, of
    other versions) is left for its keeper to replace, with one line saying so."""
    for info in backend.clusters(owner=owner):
        if info.standby_until is None or not same_shape(info.spec, spec):
            continue
        why = unusable(info)
        if why is not None:
            say(f"The standby cluster {info.name} {why}; starting a new cluster instead.")
            continue
        claimed = backend.claim(info.name, environment, namespace=info.namespace)
        if claimed is not None:
            say(f"Claimed the standby cluster {claimed.name} ({claimed.phase}).")
            return claimed
    return None


def retire_standbys(backend: Backend, owner: str) -> list[str]:
    """Delete the owner's unclaimed standbys (each conditionally); the names deleted."""
    return [
        info.name
        for info in backend.clusters(owner=owner)
        if info.standby_until is not None
        and backend.retire_standby(info.name, namespace=info.namespace)
    ]


def make_room(backend: Backend, owner: str, say: Say) -> bool:
    """Delete the owner's standbys, so that a cluster they ask for fits their quota (a
    standby never holds what its owner asks for). True when one was deleted."""
    gone = retire_standbys(backend, owner)
    for name in gone:
        say(f"Deleted the standby cluster {name} to make room in your quota.")
    return bool(gone)
