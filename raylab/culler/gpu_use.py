"""GPU use as Ray itself measures it: the reporter agent on each node reads NVML, and the
dashboard serves the figures (`GET /nodes?view=summary`) with the cluster's token.

No DCGM or Prometheus server is needed, and it works the same on both backends. A figure
that cannot be true (not finite, negative, utilization over 100 %, memory used over its
total) makes the whole reading "unknown": it is never stored or shown as a number.
"""

from __future__ import annotations

import bisect
import math
import threading
from collections import deque
from typing import Any

from ..model import GpuReading, GpuUse

SUMMARY = "/nodes?view=summary"
HISTORY_S = 3600.0  # the card's sparkline: the last hour
MAX_MIB = 16 * 1024 * 1024  # 16 TiB on one GPU is not a reading, it is an error


class Absurd(ValueError):
    """A figure no GPU can report."""


def parse_summary(body: dict[str, Any], at: float, threshold: float) -> GpuUse:
    """The GPUs of a dashboard's node summary, as a GpuUse."""
    data = body.get("data")
    nodes = data.get("summary") if isinstance(data, dict) else None
    if not isinstance(nodes, list):
        return GpuUse("unknown", at, "the dashboard's node summary has an unexpected shape",
                      threshold=threshold)  # fmt: skip
    readings: dict[str, GpuReading] = {}
    try:
        for node in nodes:
            if not isinstance(node, dict) or not _alive(node):
                continue
            gpus = node.get("gpus") or []
            if not isinstance(gpus, list):
                raise Absurd("gpus is not a list")
            for gpu in gpus:
                reading = _reading(str(node.get("ip") or "?"), gpu)
                # Nodes of one machine (the local backend) all see its GPUs: once each.
                uuid = gpu.get("uuid") if isinstance(gpu.get("uuid"), str) else None
                readings.setdefault(uuid or f"{reading.node}/{reading.index}", reading)
    except Absurd as exc:
        return GpuUse("unknown", at, f"the dashboard reported GPU figures that cannot be "
                      f"true ({exc})", threshold=threshold)  # fmt: skip
    if not readings:
        return GpuUse("not_measured", at, "no node reports a GPU", threshold=threshold)
    return GpuUse("measured", at, gpus=tuple(readings.values()), threshold=threshold)


def _alive(node: dict[str, Any]) -> bool:
    raylet = node.get("raylet")
    return not isinstance(raylet, dict) or raylet.get("state", "ALIVE") == "ALIVE"


def _reading(node: str, gpu: object) -> GpuReading:
    if not isinstance(gpu, dict):
        raise Absurd("a GPU entry is not an object")
    utilization = _number(gpu.get("utilizationGpu"), "utilization", 100.0)
    used = _number(gpu.get("memoryUsed"), "memory used", MAX_MIB)
    total = _number(gpu.get("memoryTotal"), "memory total", MAX_MIB)
    if total <= 0 or used > total:
        raise Absurd(f"memory {used:g} of {total:g} MiB")
    index = gpu.get("index")
    return GpuReading(
        node=node,
        index=index if isinstance(index, int) and not isinstance(index, bool) else 0,
        name=str(gpu.get("name") or "GPU")[:100],
        utilization=utilization,
        memory_used_mib=used,
        memory_total_mib=total,
    )


def _number(value: object, what: str, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Absurd(f"{what} {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > most:
        raise Absurd(f"{what} {value!r}")
    return number


class UseHistory:
    """The last hour of each cluster's measured mean utilization (by uid), for sparklines.

    Held in memory by whoever sweeps (the server's culler): a restart starts the line
    again, while the used GPU-seconds the ledger keeps survive it.
    """

    def __init__(self, keep_s: float = HISTORY_S) -> None:
        self.keep_s = keep_s
        self._points: dict[str, deque[tuple[float, float]]] = {}
        self._lock = threading.Lock()
        self._pruned_at = float("-inf")

    def add(self, uid: str, use: GpuUse) -> GpuUse:
        """Record a reading; returns it with the cluster's history attached.

        A sweep's readings and those read when a card is opened (server/gpu_use.py) go
        into the same line, in time order: one taken while a sweep ran may come in after
        the sweep's, which was taken at the sweep's start.
        """
        with self._lock:
            points = self._points.setdefault(uid, deque())
            if use.measured:
                point = (use.at, use.utilization)
                if not points or points[-1][0] <= use.at:
                    points.append(point)
                else:
                    points.insert(bisect.bisect_right(points, point), point)
            while points and points[0][0] < use.at - self.keep_s:
                points.popleft()
            self._forget_stale(use.at)
            return use.with_history(tuple(points))

    def _forget_stale(self, now: float) -> None:
        """Lines with no point in the last hour, now and then: whoever reads on demand
        (with no sweep's `keep_only`) never holds the lines of deleted clusters for long."""
        if now - self._pruned_at < self.keep_s:
            return
        self._pruned_at = now
        for uid in [u for u, p in self._points.items() if not p or p[-1][0] < now - self.keep_s]:
            del self._points[uid]

    def keep_only(self, uids: set[str]) -> None:
        """Forget clusters no longer seen (deleted ones)."""
        with self._lock:
            for uid in [u for u in self._points if u not in uids]:
                del self._points[uid]
