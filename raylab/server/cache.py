"""One watch per backend; every read and every live event is served from here.

A background thread consumes `backend.watch()` and hands each change to the server's
event loop, which updates the cache and fans the change out to subscribers. Fifty open
sidebars therefore cost the backend (Kubernetes) nothing beyond this one watch. When the
watch breaks, subscribers are told the backend is unreachable and the thread reconnects
with backoff; on reconnect it re-lists once, so clusters deleted meanwhile disappear.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..backends.base import Backend, ClusterEvent
from ..errors import RaylabError
from ..model import RUNNING_PHASES, ClusterInfo, GpuUse, cluster_key
from ..serving.model import ServeApps
from .paths import dashboard_path

Message = dict[str, Any]
# How long the watch's word on a deleted cluster is kept: longer than any refresh lasts.
FORGET_DELETED_S = 300.0


def cluster_json(info: ClusterInfo, home: str | None = None) -> dict[str, Any]:
    """A cluster as the REST API and the event stream show it (`namespace` included).

    The dashboard proxy serves clusters of this server's own namespace (`home`) only.
    """
    body = info.to_json()
    mine = info.namespace is None or home is None or info.namespace == home
    body["dashboard_path"] = dashboard_path(info.name) if mine else None
    return body


@dataclass(eq=False)  # identity: each open stream is its own subscriber
class Subscriber:
    queue: asyncio.Queue[Message]
    visible: Callable[[ClusterInfo], bool]


class ClusterCache:
    def __init__(self, backend: Backend, log: logging.Logger) -> None:
        self.backend = backend
        # The backend's own namespace (KubeRay; None for local): where a name alone points.
        self.home: str | None = getattr(backend, "namespace", None)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.log = log
        self.clusters: dict[str, ClusterInfo] = {}  # by cluster_key
        # Each cluster's JSON, made once per change: a list of 1,000 clusters is then a
        # join, not 1,000 serializations per request.
        self.texts: dict[str, str] = {}
        self.error: str | None = None  # why the backend is unreachable, while it is
        self.synced = asyncio.Event()  # set once the first listing is in
        self._subscribers: set[Subscriber] = set()
        # When the watch last told of each cluster (monotonic, on arrival). A refresh that
        # began before that read older news and must not overwrite it: applied after the
        # watch's DELETED, it would bring back a deleted cluster that nothing removes.
        self._watched_at: dict[str, float] = {}
        self._deleted: deque[tuple[float, str]] = deque()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="raylab-watch")
        # GPU use as the server's culler last read it, by cluster uid: kept beside what the
        # watch says (the backend never holds it), so every change keeps showing it.
        self.gpu_use: dict[str, GpuUse] = {}
        self.serve: dict[str, ServeApps] = {}  # by uid: its apps as last read (apps handler)

    # --- lifecycle ----------------------------------------------------------------

    def ensure_started(self) -> None:
        """Start watching on first use, from the loop that serves requests."""
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    # --- reads --------------------------------------------------------------------

    def list(self, visible: Callable[[ClusterInfo], bool]) -> list[ClusterInfo]:
        return sorted(
            (c for c in self.clusters.values() if visible(c)),
            key=lambda c: (c.name, c.namespace or ""),
        )

    def get(self, name: str, namespace: str | None = None) -> ClusterInfo | None:
        """The cluster `name` in `namespace` (None: the backend's own)."""
        return self.clusters.get(cluster_key(namespace or self.home, name))

    def list_text(self, visible: Callable[[ClusterInfo], bool]) -> str:
        """The visible clusters as a JSON array, sorted by name."""
        texts = (self.texts[cluster_key(c.namespace, c.name)] for c in self.list(visible))
        return "[" + ",".join(texts) + "]"

    def subscribe(self, visible: Callable[[ClusterInfo], bool]) -> Subscriber:
        sub = Subscriber(asyncio.Queue(maxsize=10_000), visible)
        self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subscribers.discard(sub)

    async def wait_synced(self, timeout: float = 10.0) -> None:
        """Wait (briefly) for the first listing, so a new server never answers an empty
        list for clusters that exist; on timeout the caller serves what it has."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.synced.wait(), timeout)

    def refresh(self, name: str, namespace: str | None = None) -> None:
        """Read one cluster from the backend now (after a write), so the writer and every
        subscriber see the change without waiting for the watch. Called off the loop."""
        started = time.monotonic()
        info = self.backend.get(name, namespace=namespace)
        key = cluster_key(namespace or self.home, name)
        self._hand_over(self._apply_refresh, (key, started, info))

    def set_gpu_use(self, uses: dict[str, GpuUse]) -> None:
        """A sweep's readings (on the loop): each running cluster shows its own. A reading
        taken since, when a card was opened, stays (with the sweep's line, which holds
        it): the sweep read at its start."""
        fresh = {}
        for uid, use in uses.items():
            now = self.gpu_use.get(uid)
            fresh[uid] = now.with_history(use.history) if now and now.at > use.at else use
        self.gpu_use = fresh
        for info in list(self.clusters.values()):
            if info.uid in uses or info.gpu_use is not None:
                self._apply(ClusterEvent("MODIFIED", info))

    def set_cluster_gpu_use(self, info: ClusterInfo, use: GpuUse) -> None:
        """One cluster's reading, taken when its card was opened (on the loop): every
        open sidebar shows it at once. An older one than the cache holds is dropped."""
        held = self.gpu_use.get(info.uid)
        if not info.uid or (held is not None and held.at > use.at):
            return
        self.gpu_use[info.uid] = use
        current = self.clusters.get(cluster_key(info.namespace or self.home, info.name))
        if current is not None and current.uid == info.uid:
            self._apply(ClusterEvent("MODIFIED", current))

    def set_cluster_serve(self, info: ClusterInfo, serve: ServeApps) -> None:
        """One cluster's Serve apps, read when asked for (on the loop): every open
        sidebar's card shows them at once."""
        if not info.uid:
            return
        self.serve[info.uid] = serve
        current = self.clusters.get(cluster_key(info.namespace or self.home, info.name))
        if current is not None and current.uid == info.uid:
            self._apply(ClusterEvent("MODIFIED", current))

    def status(self) -> Message:
        body = {"type": "STATUS", "available": self.error is None, "error": self.error}
        return {**body, "text": json.dumps(body)}

    # --- the watch thread ---------------------------------------------------------

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            try:
                snapshot = self.backend.clusters()
                self._hand_over(self._replace, (time.monotonic(), snapshot))
                delay = 0.5
                health = self._health
                for event in self.backend.watch(self._stop, on_health=health):
                    self._hand_over(self._apply_watched, (time.monotonic(), event))
            except RaylabError as exc:
                self._hand_over(self._set_error, exc.message)
            except Exception as exc:  # keep watching whatever broke; say what it was
                self.log.exception("raylab: the cluster watch failed")
                self._hand_over(self._set_error, f"cluster watch failed: {exc}")
            self._stop.wait(delay)
            delay = min(delay * 2, 10.0)

    def _health(self, error: str | None) -> None:
        """The backend's word on an outage it rides out (e.g. Kubernetes unreachable)."""
        self._hand_over(self._set_error, error)

    def _hand_over(self, fn: Callable[..., None], arg: Any) -> None:
        if self.loop is not None and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(fn, arg)

    # --- on the event loop --------------------------------------------------------

    def _replace(self, listed: tuple[float, builtins.list[ClusterInfo]]) -> None:
        at, snapshot = listed
        fresh = {cluster_key(c.namespace, c.name): c for c in snapshot}
        for key, old in list(self.clusters.items()):
            if key not in fresh:
                self._apply_watched((at, ClusterEvent("DELETED", old)))
        for key, info in fresh.items():
            event = ClusterEvent("MODIFIED" if key in self.clusters else "ADDED", info)
            self._apply_watched((at, event))
        self._set_error(None)
        self.synced.set()

    def _apply_watched(self, arrived: tuple[float, ClusterEvent]) -> None:
        from .. import metrics

        at, event = arrived
        metrics.WATCH_EVENTS.labels(event.type).inc()
        key = cluster_key(event.cluster.namespace, event.cluster.name)
        self._watched_at[key] = at
        if event.type == "DELETED":
            self._deleted.append((at, key))
        while self._deleted and self._deleted[0][0] < at - FORGET_DELETED_S:
            when, gone = self._deleted.popleft()
            if self._watched_at.get(gone) == when:
                del self._watched_at[gone]
        self._apply(event)

    def _apply_refresh(self, read: tuple[str, float, ClusterInfo | None]) -> None:
        key, started, info = read
        if self._watched_at.get(key, float("-inf")) >= started:
            return  # the watch spoke after this read began: the watch is as new or newer
        if info is not None:
            self._apply(ClusterEvent("MODIFIED", info))
        elif key in self.clusters:
            self._apply(ClusterEvent("DELETED", self.clusters[key]))

    def _apply(self, event: ClusterEvent) -> None:
        info = event.cluster
        key = cluster_key(info.namespace, info.name)
        before = self.clusters.get(key)
        if event.type == "DELETED":
            self.serve.pop(info.uid, None)
            if self.clusters.pop(key, None) is None:
                return
            text = self.texts.pop(key)
        else:
            running = info.phase in RUNNING_PHASES
            use = self.gpu_use.get(info.uid) if running else None
            if not running:
                self.serve.pop(info.uid, None)  # a resumed cluster starts without apps
            info = replace(info, gpu_use=use, serve=self.serve.get(info.uid))
            if before == info:
                return  # a re-list or resync that changed nothing
            self.clusters[key] = info
            text = self.texts[key] = json.dumps(cluster_json(info, self.home))
        kind = event.type if event.type == "DELETED" or before else "ADDED"
        message = {"type": kind, "text": f'{{"type": "{kind}", "cluster": {text}}}'}
        for sub in list(self._subscribers):
            if sub.visible(info):
                _offer(sub, message)

    def _set_error(self, error: str | None) -> None:
        if error == self.error:
            return
        self.error = error
        for sub in list(self._subscribers):
            _offer(sub, self.status())


def _offer(sub: Subscriber, message: Message) -> None:
    # A stalled client loses messages; it resyncs from the snapshot when it reconnects.
    with contextlib.suppress(asyncio.QueueFull):
        sub.queue.put_nowait(message)
