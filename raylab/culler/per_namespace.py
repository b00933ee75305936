"""One culler per namespace, under a watch of every namespace (`raylab culler -A`).

A cluster-wide culler sees every cluster through one watch, but each cluster's Ray
token, its owner's GPU-hours ledger and its idle state live in the cluster's own
namespace: a Culler on a backend of that namespace reads and writes them there, exactly
as a culler started with `--namespace` does, so users' `%raycluster usage` finds their
hours where their clusters are. Namespaces made later (onboarding at spawn) get theirs
when their first cluster appears.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from ..model import ClusterInfo
from .sweep import Culler, SweepReport


class CullerPerNamespace:
    def __init__(self, make: Callable[[str], Culler]) -> None:
        self._make = make
        self._cullers: dict[str, Culler] = {}

    def _groups(self, clusters: Iterable[ClusterInfo]) -> dict[str, list[ClusterInfo]]:
        # Every namespace seen before too, with no clusters now: its meter must see
        # them gone to end their GPU-hours. (A copy of the keys: /metrics reads from
        # another thread while a sweep may add a namespace.)
        groups: dict[str, list[ClusterInfo]] = {ns: [] for ns in list(self._cullers)}
        for info in clusters:
            groups.setdefault(info.namespace or "", []).append(info)
        return groups

    def _culler(self, namespace: str) -> Culler:
        if namespace not in self._cullers:
            self._cullers[namespace] = self._make(namespace)
        return self._cullers[namespace]

    def sweep(self, clusters: Iterable[ClusterInfo]) -> SweepReport:
        started = time.monotonic()
        total = SweepReport()
        for namespace, group in sorted(self._groups(clusters).items()):
            total.add(self._culler(namespace).sweep(group))
        total.seconds = time.monotonic() - started
        return total

    def with_gpu_use(self, clusters: Iterable[ClusterInfo]) -> list[ClusterInfo]:
        """Each cluster with its GPU use as its namespace's culler last read it; one in a
        namespace not swept yet, as it is (as a single culler shows one it has not read)."""
        shown = []
        for namespace, group in self._groups(clusters).items():
            culler = self._cullers.get(namespace)
            shown += culler.with_gpu_use(group) if culler is not None else group
        return shown

    def close(self) -> None:
        for culler in self._cullers.values():
            culler.close()
