"""List-then-watch loops (one thread per resource) feeding one queue, and the cache the
KubeRay backend derives cluster status from.

Each loop resumes from the last resourceVersion it saw (bookmarks keep it fresh), lists
again when the server answers 410 Gone, and reconnects with capped exponential backoff
when the API server goes away, so a watch outlives an API server restart. Raw JSON lines
are parsed here instead of going through the client's model classes: faster, and pods,
events and RayClusters arrive as the same plain dicts `kuberay_status` reads.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from .kueue import owner_name
from .status import is_validation_warning

log = logging.getLogger("raylab.kuberay")

MIN_BACKOFF = 0.25
MAX_BACKOFF = 5.0
WATCH_SECONDS = 240  # the server ends a watch after this; we resume from the last version
CONNECT_TIMEOUT = 5.0

# A `list_namespaced_*` method of the client with its fixed arguments bound.
ListCall = Callable[..., Any]


@dataclass(frozen=True)
class Synced:
    """A full list of one kind: replaces what the cache held."""

    kind: str
    items: list[dict[str, Any]]
    # The one namespace the list covered (None: all): an admin's watch runs one informer
    # set per namespace, and one namespace's relist must not drop the others' clusters.
    namespace: str | None = None


@dataclass(frozen=True)
class Changed:
    kind: str
    type: str  # ADDED, MODIFIED, DELETED
    obj: dict[str, Any]


Message = Synced | Changed


class GoneError(Exception):
    """The server no longer has the resourceVersion we asked for (410): list again."""


class Informer(threading.Thread):
    """List once (unless given a resourceVersion), then watch until closed."""

    def __init__(
        self,
        kind: str,
        list_call: ListCall,
        out: queue.Queue[Message],
        resource_version: str | None = None,
        describe: Callable[[BaseException], str] | None = None,
        namespace: str | None = None,
    ) -> None:
        where = f"-{namespace}" if namespace else ""
        super().__init__(name=f"raylab-watch-{kind}{where}", daemon=True)
        self.kind = kind
        self.namespace = namespace  # what list_call covers; None: every namespace
        self._list = list_call
        self._out = out
        self._version = resource_version
        self._closed = threading.Event()
        self._response: Any = None
        self.failures = 0  # consecutive failed connections
        # What is wrong while reconnecting ("cannot reach Kubernetes at ..."), else None.
        self.error: str | None = None
        self._describe = describe or _brief

    def close(self) -> None:
        """Stop; a read blocked on the socket is interrupted, not waited for."""
        self._closed.set()
        response = self._response
        if response is not None:
            # urllib3 >= 2.3: shutdown() wakes a read blocked in another thread.
            shutdown = getattr(response, "shutdown", None) or response.close
            try:
                shutdown()
            except Exception:  # already closed: nothing to interrupt
                log.debug("closing the %s watch", self.kind, exc_info=True)

    def run(self) -> None:
        delay = MIN_BACKOFF
        while not self._closed.is_set():
            try:
                if self._version is None:
                    self._version = self._relist()
                self._version = self._watch(self._version)
                delay = MIN_BACKOFF
            except GoneError:
                self._version = None
            except Exception as exc:
                if self._closed.is_set():
                    break
                self.failures += 1
                self.error = self._describe(exc)
                # Once per outage (and then every 20th try), not at every backoff step.
                level = logging.WARNING if self.failures % 20 == 1 else logging.DEBUG
                log.log(
                    level,
                    "raylab: watching %s failed (%s); retrying with backoff",
                    self.kind,
                    _brief(exc),
                )
                if getattr(exc, "status", None) == 410:
                    self._version = None
                self._closed.wait(delay)
                delay = min(delay * 2, MAX_BACKOFF)

    def _relist(self) -> str:
        response = self._list(_preload_content=False, _request_timeout=(CONNECT_TIMEOUT, 60))
        body = json.loads(response.data)
        self._out.put(Synced(self.kind, list(body.get("items") or []), self.namespace))
        return str(body["metadata"]["resourceVersion"])

    def _watch(self, version: str) -> str:
        from kubernetes.watch import watch as k8s_watch

        iter_resp_lines: Callable[[Any], Iterator[str]] = k8s_watch.iter_resp_lines
        response = self._list(
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=WATCH_SECONDS,
            _preload_content=False,
            _request_timeout=(CONNECT_TIMEOUT, WATCH_SECONDS + 30),
        )
        self._response = response
        if self.failures:
            log.info("raylab: watching %s again after %d failures", self.kind, self.failures)
            self.failures = 0
        self.error = None
        try:
            if self._closed.is_set():
                return version
            for line in iter_resp_lines(response):
                if not line:
                    continue
                event = json.loads(line)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise GoneError(obj.get("message"))
                    raise RuntimeError(obj.get("message") or "watch error")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._out.put(Changed(self.kind, kind, obj))
            return version
        finally:
            self._response = None
            response.release_conn()


# A cluster's key: (namespace, name). An admin's watch spans namespaces, where two users'
# clusters may share a name.
Key = tuple[str, str]


@dataclass
class Cache:
    """The RayClusters, their pods and their validation warnings, as the watches see them,
    each keyed by its cluster's (namespace, name)."""

    clusters: dict[Key, dict[str, Any]] = field(default_factory=dict)
    pods: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)  # cluster -> pods
    warnings: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # With Kueue: each cluster's Workloads, and the ClusterQueues by name.
    workloads: dict[Key, dict[str, dict[str, Any]]] = field(default_factory=dict)
    cluster_queues: dict[str, dict[str, Any]] = field(default_factory=dict)

    def apply(self, message: Message) -> set[Key]:
        """Fold one message in; returns the keys of the clusters it may have changed."""
        if isinstance(message, Synced):
            return self._sync(message.kind, message.items, message.namespace)
        return self._change(message.kind, message.type, message.obj)

    def pods_of(self, key: Key) -> list[dict[str, Any]]:
        return list(self.pods.get(key, {}).values())

    def warnings_of(self, key: Key) -> list[dict[str, Any]]:
        return list(self.warnings.get(key, {}).values())

    def workload_of(self, key: Key) -> dict[str, Any] | None:
        """The live Workload Kueue made for the cluster now at `key` (not for an earlier
        cluster of the same name)."""
        uid = ((self.clusters.get(key) or {}).get("metadata") or {}).get("uid")
        for workload in self.workloads.get(key, {}).values():
            meta = workload.get("metadata") or {}
            owners = {r.get("uid") for r in meta.get("ownerReferences") or []}
            if uid in owners and not meta.get("deletionTimestamp"):
                return workload
        return None

    def _sync(self, kind: str, items: list[dict[str, Any]], namespace: str | None) -> set[Key]:
        if kind == "clusterqueues":
            self.cluster_queues = {_name(o): o for o in items}
            return set(self.workloads)
        tables: dict[str, dict[Key, Any]] = {
            "rayclusters": self.clusters,
            "pods": self.pods,
            "events": self.warnings,
            "workloads": self.workloads,
        }
        table = tables[kind]
        touched = {k for k in table if namespace is None or k[0] == namespace}
        for key in touched:
            del table[key]
        for obj in items:
            touched |= self._change(kind, "ADDED", obj)
        return touched

    def _change(self, kind: str, type_: str, obj: dict[str, Any]) -> set[Key]:
        if kind == "rayclusters":
            if type_ == "DELETED":
                self.clusters.pop(key_of(obj), None)
            else:
                self.clusters[key_of(obj)] = obj
            return {key_of(obj)}
        meta = obj.get("metadata") or {}
        if kind == "clusterqueues":
            if type_ == "DELETED":
                self.cluster_queues.pop(_name(obj), None)
            else:
                self.cluster_queues[_name(obj)] = obj
            return set(self.workloads)  # any queued cluster may stand elsewhere now
        name: Any
        if kind == "workloads":
            name, namespace, table = owner_name(obj), meta.get("namespace"), self.workloads
        elif kind == "pods":
            # KubeRay's pods live in their cluster's namespace.
            name = (meta.get("labels") or {}).get("ray.io/cluster")
            namespace = meta.get("namespace")
            table = self.pods
        else:  # events
            if not is_validation_warning(obj):
                return set()
            involved = obj.get("involvedObject") or {}
            name = involved.get("name")
            namespace = involved.get("namespace") or meta.get("namespace")
            table = self.warnings
        if not name:
            return set()
        cluster = (str(namespace or ""), str(name))
        entries = table.setdefault(cluster, {})
        if type_ == "DELETED":
            entries.pop(_name(obj), None)
        else:
            entries[_name(obj)] = obj
        return {cluster}


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _name(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def _brief(exc: BaseException) -> str:
    from .errors import short_reason

    status = getattr(exc, "status", None)
    return f"HTTP {status}" if status else short_reason(exc)
