"""GPU use read again when a card is opened (`GET clusters/NAME/gpu-use`).

The server's culler reads every running cluster's GPUs once a sweep; a user who opens the
sidebar wants the figure of now. This reads one cluster's GPUs with one dashboard
request (culler/activity.py `read_gpu_use`), puts the reading on the culler's line of
the last hour (so the sparkline stays one line), and remembers it for `fresh_s`: a burst
of opens, from several tabs or users, costs one request per cluster, never more.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ..culler.activity import ActivityReader
from ..culler.gpu_use import UseHistory
from ..errors import Conflict
from ..model import RUNNING_PHASES, ClusterInfo, GpuUse

FRESH_S = 5.0  # a reading this recent is answered again, not read again


def check_readable(info: ClusterInfo) -> None:
    """A cluster whose GPUs can be read now; else a 409 saying why (as keep-running's)."""
    if info.phase not in RUNNING_PHASES:
        raise Conflict(
            f"cluster {info.name!r} is {info.phase}: its GPU use is read while it runs",
            detail="the card shows it again once the cluster is Ready",
        )
    if not info.quota_gpus:
        raise Conflict(f"cluster {info.name!r} has no GPUs: there is no GPU use to read")
    if not info.head_ready:
        raise Conflict(
            f"cluster {info.name!r} is starting: its dashboard does not answer yet",
            detail="the card shows its GPU use once its head is ready",
        )


class GpuUseReads:
    """Reads one cluster's GPU use on demand, at most once per `fresh_s` per cluster.

    Called off the event loop. Concurrent calls for one cluster wait for the read under
    way and share its answer; calls for different clusters read in parallel.
    """

    def __init__(
        self,
        reader: ActivityReader,
        history: UseHistory,
        busy_percent: float,
        *,
        fresh_s: float = FRESH_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.history = history
        self.busy_percent = busy_percent
        self.fresh_s = fresh_s
        self.clock = clock
        self.reads = 0  # dashboard reads made (a cached answer makes none)
        self._last: dict[str, tuple[float, GpuUse]] = {}  # by cluster: (clock, reading)
        self._reading: dict[str, threading.Event] = {}  # by cluster: set once it is read
        self._lock = threading.Lock()

    def read(self, info: ClusterInfo) -> GpuUse:
        """The cluster's GPU use, with the last hour's history; Conflict where it cannot
        be read now (not running, no GPUs)."""
        check_readable(info)
        key = info.uid or f"{info.namespace or ''}/{info.name}"
        while True:
            with self._lock:
                self._forget_old()
                if key in self._last:
                    return self._last[key][1]
                under_way = self._reading.get(key)
                if under_way is None:
                    done = self._reading[key] = threading.Event()
                    break
            under_way.wait()  # another request reads it: its answer is this one's too
        try:
            use = self.reader.read_gpu_use(info, self.busy_percent)
            if info.uid:
                use = self.history.add(info.uid, use)
            with self._lock:
                self.reads += 1
                self._last[key] = (self.clock(), use)
            return use
        finally:
            with self._lock:
                del self._reading[key]
            done.set()

    def _forget_old(self) -> None:
        """Drop readings past `fresh_s` (under `_lock`): what is kept is bounded by the
        clusters opened in the last seconds."""
        now = self.clock()
        for key in [k for k, (at, _) in self._last.items() if now - at >= self.fresh_s]:
            del self._last[key]
