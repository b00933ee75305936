"""Tells the cullers that a notebook is at work: a running cell is work, even one that
does not touch Ray (culler/activity.py counts `ClusterInfo.cell_at`).

When a cell starts or ends in a kernel connected to a cluster, and every minute while a
cell runs, the cluster is stamped with the time: at most one write a minute (a merge
patch of an annotation on KubeRay, the local cluster's file), always from a background
thread, so no cell waits on it and a backend that does not answer costs the cell nothing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ..model import CELL_STAMP_S

_log = logging.getLogger("raylab")

Mark = Callable[[str, float], None]  # stamps this cluster with a cell at this time


class CellStamps:
    def __init__(
        self, connected: Callable[[], str | None], mark: Mark, every_s: float = CELL_STAMP_S
    ) -> None:
        self._connected = connected  # the cluster this kernel drives now, if any
        self._mark = mark
        self.every_s = every_s
        # The last stamp sent (monotonic) and its cluster: a kernel that connects to
        # another cluster stamps that one at its next cell, not a minute later.
        self._last = float("-inf")
        self._last_cluster: str | None = None
        self._running = threading.Event()
        self._lock = threading.Lock()
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="raylab-cell-stamp")
        self._ticker: threading.Thread | None = None
        self._pending = False  # a write is queued or under way: never more than one

    def pre_run_cell(self, *_: object) -> None:
        self._running.set()
        self._stamp()
        if self._ticker is None or not self._ticker.is_alive():
            self._ticker = threading.Thread(target=self._tick, daemon=True,
                                            name="raylab-cell-ticker")  # fmt: skip
            self._ticker.start()

    def post_run_cell(self, *_: object) -> None:
        self._running.clear()
        self._stamp()

    def _tick(self) -> None:
        """While a cell runs: a stamp each period (a cell of hours is work all along)."""
        while self._running.is_set():
            time.sleep(min(5.0, self.every_s))
            if self._running.is_set():
                self._stamp()

    def _stamp(self) -> None:
        cluster = self._connected()
        if cluster is None:
            return
        with self._lock:
            now = time.monotonic()
            recent = cluster == self._last_cluster and now - self._last < self.every_s
            if self._pending or recent:
                return
            self._last, self._last_cluster, self._pending = now, cluster, True
        self._writer.submit(self._write, cluster, time.time())

    def _write(self, cluster: str, at: float) -> None:
        try:
            self._mark(cluster, at)
        except Exception as exc:  # a stamp is a hint; the cell never hears of it
            _log.debug("raylab: could not stamp the cluster with a running cell: %s", exc)
        finally:
            with self._lock:
                self._pending = False
