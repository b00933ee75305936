"""Kueue requests of the KubeRay backend: the LocalQueue check before a create, a
cluster's Workload, the queue's pending list (visibility API) and its ClusterQueue,
and a Workload's `active` switch (the owner's suspend and resume).

Reads that only add detail (positions, GPUs in use) are optional: where RBAC refuses
them, the cluster still shows Queued, with less said. What raylab needs to work (the
LocalQueue, the Workload in the user's own namespace) raises, naming what is missing.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ...errors import BackendUnavailable, Forbidden, NotFound
from ...model import Capacity, QueueInfo
from .errors import Call, api_errors
from .kueue import (
    KUEUE,
    VISIBILITY,
    admitted,
    cluster_queue_gpus,
    gpus_of,
    pending_key,
    queue_info,
    queue_of,
)
from .watch import Cache, Key

REQUEST_TIMEOUT = (5.0, 30.0)
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
# A cluster's pending list is only worth reading while something of ours waits in it.
Pending = list[dict[str, Any]]


class Queues:
    """Kueue for one backend: `call` names a request for error messages."""

    def __init__(self, api: Any, server: str, call: Callable[..., Call]) -> None:
        from kubernetes import client

        self.api = api
        self.custom = client.CustomObjectsApi(api)
        self.server = server
        self._call = call
        self._cluster_queues: dict[tuple[str, str], str] = {}  # (ns, LocalQueue) -> CQ
        self._lock = threading.Lock()

    # --- before a create ----------------------------------------------------------

    def check(self, namespace: str, local_queue: str) -> str:
        """The ClusterQueue behind `local_queue`; raises, naming what is missing."""
        try:
            with api_errors(self._call("get", "localqueues", local_queue, namespace=namespace)):
                lq = self._json(self.custom.get_namespaced_custom_object, *KUEUE, namespace,
                                "localqueues", local_queue)  # fmt: skip
        except NotFound:
            raise BackendUnavailable(
                f"Kueue has no LocalQueue {local_queue!r} in namespace {namespace!r}, which "
                "c.Raylab.local_queue names for this GPU type",
                detail="ask your admin to create it (docs/kueue.md) or to correct local_queue",
            ) from None
        cq = str((lq.get("spec") or {}).get("clusterQueue") or "")
        with self._lock:
            self._cluster_queues[(namespace, local_queue)] = cq
        return cq

    def cluster_queue_of(self, namespace: str, local_queue: str) -> str:
        """The LocalQueue's ClusterQueue ('' where it cannot be read), read once."""
        with self._lock:
            known = self._cluster_queues.get((namespace, local_queue))
        if known is not None:
            return known
        try:
            return self.check(namespace, local_queue)
        except (BackendUnavailable, Forbidden):
            return ""

    # --- one cluster ----------------------------------------------------------------

    def workload(self, namespace: str, uid: str) -> dict[str, Any] | None:
        """The Workload Kueue made for the RayCluster with `uid`, else None."""
        if not uid:
            return None
        with api_errors(self._call("list", "workloads", namespace=namespace)):
            items = self._json(
                self.custom.list_namespaced_custom_object, *KUEUE, namespace, "workloads",
                label_selector=f"{JOB_UID_LABEL}={uid}",
            )["items"]  # fmt: skip
        live = [w for w in items if not (w.get("metadata") or {}).get("deletionTimestamp")]
        return live[0] if live else None

    def describe(self, cluster: Mapping[str, Any]) -> QueueInfo | None:
        """QueueInfo of one RayCluster, read now (a status, a wait's poll)."""
        local_queue = queue_of(cluster)
        if not local_queue:
            return None
        meta = cluster.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        workload = self.workload(namespace, str(meta.get("uid") or ""))
        cq_name = self.cluster_queue_of(namespace, local_queue)
        if workload is None or admitted(workload):
            return queue_info(cluster, workload, cluster_queue=cq_name)
        pending = self.pending(namespace, local_queue, cq_name)
        cq = self.cluster_queue(cq_name)
        return queue_info(cluster, workload, cluster_queue=cq_name, pending=pending,
                          gpus_by_workload=self.gpus_ahead(pending or []), cq=cq)  # fmt: skip

    # --- the queue ------------------------------------------------------------------

    def pending(self, namespace: str, local_queue: str, cluster_queue: str) -> Pending | None:
        """The pending workloads of the ClusterQueue, each with its position (all of
        them where allowed, else this LocalQueue's); None where neither is readable."""
        paths = []
        if cluster_queue:
            paths.append((f"{VISIBILITY}/clusterqueues/{cluster_queue}/pendingworkloads",
                          self._call("get", "clusterqueues/pendingworkloads", cluster_queue,
                                     namespace="")))  # fmt: skip
        paths.append((
            f"{VISIBILITY}/namespaces/{namespace}/localqueues/{local_queue}/pendingworkloads",
            self._call("get", "localqueues/pendingworkloads", local_queue, namespace=namespace),
        ))  # fmt: skip
        for path, call in paths:
            try:
                with api_errors(call):
                    body = self._get(path)
            except (Forbidden, NotFound, BackendUnavailable):
                continue
            items = body.get("items")
            if isinstance(items, list):
                return [i for i in items if isinstance(i, dict)]
        return None

    def cluster_queue(self, name: str) -> dict[str, Any] | None:
        """The ClusterQueue (usage, quota), where readable."""
        if not name:
            return None
        try:
            with api_errors(self._call("get", "clusterqueues", name, namespace="")):
                obj: dict[str, Any] = self._json(
                    self.custom.get_cluster_custom_object, *KUEUE, "clusterqueues", name
                )
        except (Forbidden, NotFound, BackendUnavailable):
            return None
        return obj

    def gpus_ahead(self, pending: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], int]:
        """GPUs of pending workloads, where this user may read them (their own namespace,
        or all of them for an admin with the overview role): one list per namespace."""
        found: dict[tuple[str, str], int] = {}
        for namespace in sorted({str((p.get("metadata") or {}).get("namespace") or "")
                                 for p in pending} - {""}):  # fmt: skip
            try:
                with api_errors(self._call("list", "workloads", namespace=namespace)):
                    items = self._json(self.custom.list_namespaced_custom_object, *KUEUE,
                                       namespace, "workloads")["items"]  # fmt: skip
            except (Forbidden, NotFound, BackendUnavailable):
                continue
            for w in items:
                meta = w.get("metadata") or {}
                found[(namespace, str(meta.get("name") or ""))] = gpus_of(w)
        return found

    def capacity(self, namespace: str, local_queue: str, gpu_type: str, gpus: int) -> Capacity:
        """Free now, or what waits ahead: the ClusterQueue's usage and pending list."""
        cq_name = self.check(namespace, local_queue)  # a missing queue is said before `up`
        cq = self.cluster_queue(cq_name)
        used, quota = cluster_queue_gpus(cq) if cq is not None else (None, None)
        pending = self.pending(namespace, local_queue, cq_name)
        waiting = waiting_gpus = None
        if pending is not None:
            waiting = len(pending)
            known = self.gpus_ahead(pending)
            keys = [pending_key(p, namespace) for p in pending]
            if all(k in known for k in keys):
                waiting_gpus = sum(known[k] for k in keys)
        return Capacity(
            gpu_type=gpu_type, gpus=gpus, queue=local_queue,
            cluster_queue=cq_name, gpus_in_use=used, gpus_quota=quota, waiting=waiting,
            waiting_gpus=waiting_gpus,
        )  # fmt: skip

    # --- the owner's suspend and resume ---------------------------------------------

    def set_active(self, cluster: Mapping[str, Any], active: bool) -> bool:
        """Deactivate (suspend) or activate (resume, back in the queue) the cluster's
        Workload; False when it has none yet."""
        meta = cluster.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        workload = self.workload(namespace, str(meta.get("uid") or ""))
        if workload is None:
            return False
        name = str(workload["metadata"]["name"])
        with api_errors(self._call("patch", "workloads", name, namespace=namespace)):
            self.custom.patch_namespaced_custom_object(
                *KUEUE, namespace, "workloads", name, {"spec": {"active": active}},
                _content_type="application/merge-patch+json", _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
        return True

    # --- helpers --------------------------------------------------------------------

    def _json(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        return json.loads(method(*args, _preload_content=False, **kwargs).data)

    def _get(self, path: str) -> dict[str, Any]:
        """GET of an API path the generated client has no method for (the visibility
        API's subresources); a failure raises the client's ApiException, as its methods."""
        return get_json(self.api, path)


class QueueView:
    """Queue places for the backend's watch: Workloads and ClusterQueues arrive through
    the watch's cache; the pending positions are read from the visibility API once per
    change of a queue that holds one of the watched clusters, never on a timer."""

    def __init__(self, queues: Queues) -> None:
        self.queues = queues
        self.pending: dict[str, Pending | None] = {}  # by ClusterQueue (or ns/LocalQueue)
        self._waiting: dict[str, list[Key]] = {}

    def info(self, key: Key, cache: Cache) -> QueueInfo | None:
        obj = cache.clusters.get(key)
        if obj is None or not queue_of(obj):
            return None
        workload = cache.workload_of(key)
        where = self._queue(key[0], queue_of(obj))
        cq = cache.cluster_queues.get(where)
        known: dict[tuple[str, str], int] = {}
        if workload is not None and not admitted(workload) and self.pending.get(where):
            # What the Workloads the watch holds ask for: only a waiting cluster's place
            # needs it (an admin's watch holds every namespace's).
            known = {
                (ns, str((w.get("metadata") or {}).get("name") or "")): gpus_of(w)
                for (ns, _), table in cache.workloads.items()
                for w in table.values()
            }
        return queue_info(
            obj, workload, cluster_queue="" if "/" in where else where,
            pending=self.pending.get(where), gpus_by_workload=known, cq=cq,
        )  # fmt: skip

    def refresh(self, cache: Cache, kinds: set[str]) -> set[Key]:
        """After watch messages of `kinds`: read the positions of every queue where a
        watched cluster waits (one read per queue), and return those clusters' keys."""
        waiting: dict[str, list[Key]] = {}
        for key, obj in sorted(cache.clusters.items()):
            local_queue = queue_of(obj)
            workload = cache.workload_of(key)
            if local_queue and workload is not None and not admitted(workload):
                waiting.setdefault(self._queue(key[0], local_queue), []).append(key)
        # A RayCluster's own changes (its pods starting) move no queue: only a Workload
        # or a ClusterQueue that changed, or a cluster that starts or stops waiting.
        if not kinds & {"workloads", "clusterqueues"} and waiting == self._waiting:
            return set()
        self._waiting = waiting
        touched: set[Key] = set()
        for where, keys in waiting.items():
            namespace = keys[0][0]
            local_queue = queue_of(cache.clusters[keys[0]])
            cq = "" if "/" in where else where
            self.pending[where] = self.queues.pending(namespace, local_queue, cq)
            touched.update(keys)
        for where in set(self.pending) - set(waiting):
            del self.pending[where]
        return touched

    def _queue(self, namespace: str, local_queue: str) -> str:
        """The ClusterQueue's name, or 'ns/LocalQueue' where it cannot be read."""
        return self.queues.cluster_queue_of(namespace, local_queue) or f"{namespace}/{local_queue}"


def get_json(api: Any, path: str) -> dict[str, Any]:
    """GET `path` from the API server with `api`'s credentials, as JSON."""
    from kubernetes.client.exceptions import ApiException

    method, url, headers, body, post = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers, body=body, post_params=post,
                            _request_timeout=REQUEST_TIMEOUT)  # fmt: skip
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    parsed = json.loads(response.data)
    return parsed if isinstance(parsed, dict) else {}
