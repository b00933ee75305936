"""The clusters of one backend as its watch reports them, for a culler of its own.

The Jupyter server has its cache (server/cache.py); `raylab culler` runs without one,
so this keeps the same view from one list and then the watch alone: a sweep reads it
and makes no request to find clusters.
"""

from __future__ import annotations

import logging
import threading

from .. import metrics
from ..backends.base import Backend
from ..errors import RaylabError
from ..model import ClusterInfo, cluster_key

log = logging.getLogger("raylab.culler")


class ClusterMirror:
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        # By namespace and name: a culler of every namespace sees clusters of one name in
        # several (each user's "first").
        self._clusters: dict[str, ClusterInfo] = {}
        self._lock = threading.Lock()
        self.synced = threading.Event()
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="raylab-mirror")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def clusters(self) -> list[ClusterInfo]:
        with self._lock:
            return sorted(self._clusters.values(), key=lambda c: (c.name, c.namespace or ""))

    def _health(self, error: str | None) -> None:
        self.error = error

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                listed = {_key(c): c for c in self.backend.clusters()}
                with self._lock:
                    self._clusters = listed
                self.error = None
                self.synced.set()
                delay = 0.5
                for event in self.backend.watch(self._stop, on_health=self._health):
                    metrics.WATCH_EVENTS.labels(event.type).inc()
                    with self._lock:
                        if event.type == "DELETED":
                            self._clusters.pop(_key(event.cluster), None)
                        else:
                            self._clusters[_key(event.cluster)] = event.cluster
            except RaylabError as exc:
                self.error = exc.message
                metrics.API_ERRORS.labels("watch", str(exc.status)).inc()
                log.warning("raylab culler: watching clusters failed: %s", exc.message)
            except Exception as exc:  # keep watching whatever broke; say what it was
                self.error = f"cluster watch failed: {exc}"
                log.exception("raylab culler: the cluster watch failed")
            self._stop.wait(delay)
            delay = min(delay * 2, 10.0)


def _key(info: ClusterInfo) -> str:
    return cluster_key(info.namespace, info.name)
