"""KubeRay backend: one `RayCluster` (ray.io/v1) per cluster, through the `kubernetes` client.

The RayCluster object is the truth: its annotations hold the ClusterSpec and owner, its
conditions and pods give the status (kuberay_status), so clusters made by the magics,
the CLI, another tab or kubectl all look alike. Ownership and quotas are the service's
job. The `kubernetes` package is imported only when a backend is made (~0.5 s), never
by `import raylab`.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import Any

from ...config import Settings
from ...errors import BackendUnavailable, Conflict, Forbidden, NotFound, SpecError
from ...identity import owner_label
from ...model import Capacity, ClusterEnvironment, ClusterInfo, IdleState, QueueInfo
from ...spec import ClusterSpec
from ..base import ClusterEvent
from .config import in_cluster, load_api_client, resolve_namespace
from .errors import ALL_NAMESPACES, Call, Refused, api_errors, translate
from .kueue import KUEUE, PRIORITY_LABEL, QUEUE_LABEL, queue_of
from .manifest import (
    CELL_ANNOTATION,
    CLIENT_PORT,
    DASHBOARD_PORT,
    ENVIRONMENT_ANNOTATION,
    GCS_PORT,
    HEAD_CONTAINER,
    IDLE_ANNOTATION,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    METRICS_PORT,
    OWNER_LABEL,
    SERVE_PORT,
    SPEC_ANNOTATION,
    STANDBY_ANNOTATION,
    cluster_labels,
    idle_annotation,
    raycluster_manifest,
    spec_annotation,
    versions_from_image,
)
from .portforward import Relay
from .queueing import Queues, QueueView
from .quota_lock import QuotaLease
from .security import AUTH_ANNOTATION, ClusterSecurity
from .status import (
    cluster_info,
    derive_status,
    operator_deadline,
    pod_ready,
    spec_of,
    worker_group_index,
)
from .watch import Cache, Informer, Key, Message

RAY = ("ray.io", "v1")
PLURAL = "rayclusters"
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
RAY_PODS = "ray.io/cluster"  # label KubeRay puts on every pod of a cluster
RAYCLUSTER_WARNINGS = "involvedObject.kind=RayCluster,type=Warning"

# Port-forwards outlive the backend object (the magics make one per command): one per
# (API server, namespace, cluster, port) for the life of the process.
_forwards: dict[tuple[str, str, str, int], Relay] = {}
_forwards_lock = threading.Lock()


class KubeRayBackend:
    name = "kuberay"
    restarts_nodes = True
    driver_joins = True
    autoscales = True
    may_queue = True
    workers_read_owner_files = False
    state_dir = None
    # The quota Lease: how long a dead holder keeps it, how long a request waits for it.
    quota_lease_s = 15
    quota_wait_s = 60.0

    def __init__(
        self,
        settings: Settings,
        *,
        api_client: Any = None,
        namespace: str | None = None,
        user: str | None = None,
        watch_namespaces: Sequence[str] = (),
    ) -> None:
        """`watch_namespaces`: what an admin's backend also watches and lists besides its
        own namespace (["*"]: every namespace); creates always go to its own."""
        from kubernetes import client

        self.settings = settings
        context_namespace: str | None = None
        if api_client is None:
            api_client, context_namespace = load_api_client()
        self.api = api_client
        self.server: str = str(api_client.configuration.host)
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.namespace = namespace or resolve_namespace(settings, user, context_namespace)
        self.security = ClusterSecurity(api_client, self.namespace, settings, self._call)
        # Kueue, where the admin queues clusters (c.Raylab.local_queue): no requests else.
        self.queues = Queues(api_client, self.server, self._call) if settings.queueing else None
        # The namespaces listed and watched; None stands for all of them (one request).
        self.scopes: list[str | None]
        if ALL_NAMESPACES in watch_namespaces:
            self.scopes = [None]
        else:
            others = [n for n in dict.fromkeys(watch_namespaces) if n != self.namespace]
            self.scopes = [self.namespace, *others]

    # --- Backend interface --------------------------------------------------------

    def quota_lock(self, owner: str, *, namespace: str | None = None) -> QuotaLease:
        """A Lease per owner in the clusters' namespace (quota_lock.py)."""
        return QuotaLease(self.api, namespace or self.namespace, owner, self.server,
                          duration_s=self.quota_lease_s, wait_s=self.quota_wait_s)  # fmt: skip

    def create(
        self,
        spec: ClusterSpec,
        owner: str,
        environment: ClusterEnvironment | None = None,
        *,
        standby_until: float | None = None,
    ) -> ClusterInfo:
        profile = self.settings.profiles.get(spec.gpu_type)
        if profile is None:
            raise SpecError("gpu_type", f"unknown GPU type {spec.gpu_type!r}")
        image, ray_version, python_version = self.image_for(spec)
        account = self.settings.options.service_account or None
        defaults = self.settings.profiles.defaults
        labels = cluster_labels(owner, spec.gpu_type)
        local_queue = self.settings.local_queue(spec.gpu_type) if self.queues else ""
        if local_queue and self.queues is not None:
            self.queues.check(self.namespace, local_queue)  # before anything is made
        # Secret and NetworkPolicies first: no Ray pod runs without its token, or unfenced.
        made = self.security.prepare(spec.name, owner, labels)
        body = raycluster_manifest(
            spec,
            profile,
            owner=owner,
            namespace=self.namespace,
            image=image,
            ray_version=ray_version,
            python_version=python_version,
            service_account=account,
            head_cpus=defaults.head_cpus,
            head_memory=defaults.head_memory,
            ray_env=made.ray_env,
        )
        if made.secret:
            body["metadata"]["annotations"][AUTH_ANNOTATION] = "token"
        if local_queue:
            # Kueue's webhook creates it suspended; Kueue starts it once admitted.
            body["metadata"]["labels"][QUEUE_LABEL] = local_queue
            priority = spec.priority or next(iter(self.settings.options.priority_classes), "")
            if priority:
                body["metadata"]["labels"][PRIORITY_LABEL] = priority
        if environment is not None:
            body["metadata"]["annotations"][ENVIRONMENT_ANNOTATION] = environment.to_annotation()
        if standby_until is not None:
            body["metadata"]["annotations"][STANDBY_ANNOTATION] = f"{standby_until:.3f}"
            standby_priority = self.settings.options.standby_priority_class
            if local_queue and standby_priority:
                # Waits at the lowest priority: real work preempts it (a claim raises it).
                body["metadata"]["labels"][PRIORITY_LABEL] = standby_priority
        try:
            with api_errors(self._call("create", PLURAL, spec.name)):
                obj = self._json(self.custom.create_namespaced_custom_object, *RAY,
                                 self.namespace, PLURAL, body)  # fmt: skip
        except Exception:
            self.security.discard(made)
            raise
        self.security.adopt(made, obj)
        return cluster_info(obj, in_cluster=in_cluster(), queue=self._queue(obj))

    def get(self, name: str, *, namespace: str | None = None) -> ClusterInfo | None:
        """`namespace`: where the cluster is, for an admin's; None: this backend's own."""
        ns = namespace or self.namespace
        obj = self._read(name, ns)
        if obj is None:
            return None
        pods = self._pods(f"{RAY_PODS}={name}", ns)
        warnings = self._warnings(name, ns) if _maybe_refused(obj) else []
        return cluster_info(obj, pods, warnings, in_cluster=in_cluster(), queue=self._queue(obj))

    def clusters(self, owner: str | None = None) -> list[ClusterInfo]:
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
        if owner is not None:
            selector += f",{OWNER_LABEL}={owner_label(owner)}"
        cache = Cache()
        for scope in self.scopes:
            calls = self._list_calls(scope, selector)
            list_call, call = calls["rayclusters"]
            with api_errors(call):
                items = self._json(list_call)["items"]
            if not items:
                continue
            cache.apply(_synced("rayclusters", items, scope))
            list_call, call = calls["pods"]
            with api_errors(call):
                cache.apply(_synced("pods", self._json(list_call)["items"], scope))
            if any(_maybe_refused(o) for o in items):
                cache.apply(_synced("events", self._optional_events(*calls["events"]), scope))
        infos = [
            cluster_info(
                o,
                cache.pods_of(key),
                cache.warnings_of(key),
                in_cluster=in_cluster(),
                queue=self._queue(o),
            )
            for key, o in cache.clusters.items()
        ]
        # The label is a lossy form of the username; the annotation is exact.
        mine = [i for i in infos if owner is None or i.owner == owner]
        return sorted(mine, key=lambda i: (i.name, i.namespace or ""))

    def delete(
        self, name: str, propagation: str = "Foreground", *, namespace: str | None = None
    ) -> None:
        """Delete the RayCluster; Kubernetes' garbage collector removes its pods and Service.

        Foreground (the default) keeps the object, shown as Deleting, until its pods are
        gone; Background removes it at once and the pods follow.
        """
        ns = namespace or self.namespace
        with api_errors(self._call("delete", PLURAL, name, namespace=ns)):
            self.custom.delete_namespaced_custom_object(
                *RAY, ns, PLURAL, name, propagation_policy=propagation,
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip

    def claim(
        self, name: str, environment: ClusterEnvironment | None, *, namespace: str | None = None
    ) -> ClusterInfo | None:
        """Make the standby `name` an ordinary cluster: one JSON patch whose `test` of the
        standby annotation as read lets exactly one of racing claims (or a culler's
        retire) through. None when it is no standby (any more)."""
        ns = namespace or self.namespace
        obj = self._read(name, ns)
        meta = obj["metadata"] if obj is not None else {}
        until = (meta.get("annotations") or {}).get(STANDBY_ANNOTATION)
        if obj is None or until is None or meta.get("deletionTimestamp"):
            return None
        patch: list[dict[str, Any]] = [
            {"op": "test", "path": _annotation_path(STANDBY_ANNOTATION), "value": until},
            {"op": "remove", "path": _annotation_path(STANDBY_ANNOTATION)},
            # Its idle clock starts with its owner.
            {"op": "add", "path": _annotation_path(IDLE_ANNOTATION),
             "value": idle_annotation(IdleState())},
        ]  # fmt: skip
        if environment is not None:
            patch.append({"op": "add", "path": _annotation_path(ENVIRONMENT_ANNOTATION),
                          "value": environment.to_annotation()})  # fmt: skip
        labels = meta.get("labels") or {}
        if PRIORITY_LABEL in labels and labels[PRIORITY_LABEL] == (
            self.settings.options.standby_priority_class
        ):
            default = next(iter(self.settings.options.priority_classes), "")
            path = _annotation_path(PRIORITY_LABEL, "labels")
            patch.append(
                {"op": "add", "path": path, "value": default}
                if default
                else {"op": "remove", "path": path}
            )
        try:
            return self._patch(name, patch, "application/json-patch+json", ns)
        except (NotFound, Conflict, Refused):
            return None  # claimed or retired meanwhile

    def retire_standby(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete `name` if it is still an unclaimed standby (a delete conditional on
        the version read); False when it is not."""
        ns = namespace or self.namespace
        obj = self._read(name, ns)
        if obj is None or STANDBY_ANNOTATION not in (obj["metadata"].get("annotations") or {}):
            return False
        from kubernetes import client as k8s_client

        version = obj["metadata"].get("resourceVersion")
        try:
            with api_errors(self._call("delete", PLURAL, name, namespace=ns)):
                self.custom.delete_namespaced_custom_object(
                    *RAY, ns, PLURAL, name, propagation_policy="Background",
                    body=k8s_client.V1DeleteOptions(
                        preconditions=k8s_client.V1Preconditions(resource_version=version)
                    ),
                    _request_timeout=REQUEST_TIMEOUT,
                )  # fmt: skip
        except (NotFound, Conflict):
            return False  # changed (claimed) or gone meanwhile
        return True

    def scale(self, name: str, workers: int, *, namespace: str | None = None) -> ClusterInfo:
        ns = namespace or self.namespace
        obj = self._require(name, ns)
        index = worker_group_index(obj)
        if index is None:
            raise SpecError("workers", f"cluster {name!r} has no worker group to scale")
        group = obj["spec"]["workerGroupSpecs"][index]
        spec = spec_of(obj).with_workers(workers)
        if obj["spec"].get("enableInTreeAutoscaling"):
            # The autoscaler keeps replicas within [min, max]: widen the range to include
            # the new count, or it would undo the change.
            low = min(int(group.get("minReplicas") or 0), workers)
            high = max(int(group.get("maxReplicas") or 0), workers)
            spec = ClusterSpec(**{**asdict(spec), "min_workers": low, "max_workers": high})
        else:
            low = high = workers
        path = f"/spec/workerGroupSpecs/{index}"
        patch: list[dict[str, Any]] = [
            # Guards the index: fails (422) if the groups were reordered meanwhile.
            {"op": "test", "path": f"{path}/groupName", "value": group["groupName"]},
            {"op": "add", "path": f"{path}/replicas", "value": workers},
            {"op": "add", "path": f"{path}/minReplicas", "value": low},
            {"op": "add", "path": f"{path}/maxReplicas", "value": high},
        ]
        if (obj["metadata"].get("annotations") or {}).get(SPEC_ANNOTATION):
            patch.append(
                {"op": "add", "path": _annotation_path(SPEC_ANNOTATION),
                 "value": spec_annotation(spec)}
            )  # fmt: skip
        return self._patch(name, patch, "application/json-patch+json", ns)

    def set_environment(
        self, name: str, environment: ClusterEnvironment, *, namespace: str | None = None
    ) -> ClusterInfo:
        ns = namespace or self.namespace
        self._require(name, ns)  # a merge patch of a missing object would say less
        patch = {"metadata": {"annotations": {ENVIRONMENT_ANNOTATION: environment.to_annotation()}}}
        return self._patch(name, patch, "application/merge-patch+json", ns)

    def mark_cell(self, name: str, at: float, *, namespace: str | None = None) -> None:
        """A kernel connected to the cluster ran a cell at `at`: one merge patch of an
        annotation (at most once a minute per kernel; the cullers' watch sees it)."""
        patch = {"metadata": {"annotations": {CELL_ANNOTATION: f"{at:.3f}"}}}
        self._patch(name, patch, "application/merge-patch+json", namespace or self.namespace)

    def set_suspended(
        self, name: str, suspended: bool, *, namespace: str | None = None
    ) -> ClusterInfo:
        # A user's suspend or resume also empties the idle state: no idle reason shown,
        # and a resumed cluster's idle clock starts again.
        ns = namespace or self.namespace
        body: dict[str, Any] = {
            "spec": {"suspend": suspended},
            "metadata": {"annotations": {IDLE_ANNOTATION: idle_annotation(IdleState())}},
        }
        # Only where Kueue may hold it is the object read first.
        if self.queues is not None and queue_of(obj := self._require(name, ns)):
            # Kueue owns `suspend` of what it queues: its Workload's `active` is the
            # owner's switch (off: suspended, its quota freed; on: back in the queue).
            if not self.queues.set_active(obj, not suspended):
                raise Conflict(
                    f"Kueue has not queued cluster {name!r} yet, so it cannot be "
                    f"{'suspended' if suspended else 'resumed'} through its queue",
                    detail="try again in a moment; if it stays so, ask your admin whether "
                    "Kueue is running",
                )
            del body["spec"]
        return self._patch(name, body, "application/merge-patch+json", ns)

    def update_idle(
        self,
        name: str,
        idle: IdleState,
        *,
        expected: IdleState | None = None,
        suspend: bool = False,
        namespace: str | None = None,
    ) -> bool:
        """Store the culler's idle state if the annotation still holds `expected` (None:
        whatever it holds), and with `suspend`, suspend the cluster in the same patch.

        One JSON patch whose `test` compares the annotation as read: of any number of
        cullers that read the same state, exactly one write succeeds (the API server
        applies patches one at a time), so a cluster is suspended once. An empty
        `expected` is not tested, since clusters made before raylab kept idle state have
        no annotation to test; a suspension always follows a stored warning.
        """
        path = _annotation_path(IDLE_ANNOTATION)
        patch: list[dict[str, Any]] = []
        if expected is not None and expected != IdleState():
            patch.append({"op": "test", "path": path, "value": idle_annotation(expected)})
        patch.append({"op": "add", "path": path, "value": idle_annotation(idle)})
        ns = namespace or self.namespace
        queued = None
        if suspend and self.queues is not None:
            obj = self._read(name, ns)
            queued = obj if obj is not None and queue_of(obj) else None
        if suspend and queued is None:
            # A user's own suspend empties the annotation, so the `test` fails then.
            patch.append({"op": "add", "path": "/spec/suspend", "value": True})
        try:
            with api_errors(self._call("patch", PLURAL, name, namespace=ns)):
                self.custom.patch_namespaced_custom_object(
                    *RAY, ns, PLURAL, name, patch,
                    _content_type="application/json-patch+json",
                    _request_timeout=REQUEST_TIMEOUT,
                )  # fmt: skip
        except (NotFound, Conflict, Refused):
            return False  # gone, or changed since it was read: decided again next sweep
        if queued is not None and self.queues is not None:
            # Once the idle state is stored (this culler won): through Kueue, as the
            # owner's suspend, so that Kueue frees its quota and does not restart it.
            self.queues.set_active(queued, False)
        return True

    def logs(self, name: str, tail: int = 200, *, namespace: str | None = None) -> str:
        ns = namespace or self.namespace
        obj = self._require(name, ns)
        heads = self._pods(f"{RAY_PODS}={name},ray.io/node-type=head", ns)
        if not heads:
            phase = derive_status(obj).phase
            return f"{name} has no head pod yet (phase {phase}): no log to show.\n"
        head = sorted(heads, key=lambda p: not pod_ready(p))[0]["metadata"]["name"]
        try:
            with api_errors(self._call("get", "pods/log", head, namespace=ns)):
                read_log: Callable[..., Any] = self.core.read_namespaced_pod_log
                response = read_log(
                    head, ns, container=HEAD_CONTAINER, tail_lines=tail,
                    _preload_content=False, _request_timeout=REQUEST_TIMEOUT,
                )  # fmt: skip
        except Refused as exc:  # "container ray-head is waiting to start: ContainerCreating"
            return f"The head pod {head} has no log yet: {exc.said}\n"
        text = str(response.data.decode(errors="replace"))
        return text if text.endswith("\n") or not text else text + "\n"

    def auth_token(self, name: str) -> str | None:
        obj = self._require(name)
        if (obj["metadata"].get("annotations") or {}).get(AUTH_ANNOTATION) != "token":
            return None
        return self.security.read_token(name)

    def watch(
        self, stop: threading.Event, on_health: Callable[[str | None], None] | None = None
    ) -> Iterator[ClusterEvent]:
        """ADDED for each cluster, then every change, until `stop` is set.

        RayClusters, their pods and the operator's Warning events are watched (three
        threads, one queue): a pod that becomes unschedulable, or Ready, changes a
        cluster's phase without the RayCluster changing. Status is derived from this
        cache, with no further requests, as soon as a change arrives; and once more, on
        the clock, for a new cluster the operator leaves alone past OPERATOR_GRACE_S, so
        that watchers hear the operator may be down.

        Errors at the start raise (no KubeRay, RBAC); later the watch outlives outages,
        reconnecting with backoff. `on_health` (called from the iterating thread) hears
        what is wrong meanwhile ("cannot reach Kubernetes at ..."), and None once the
        watch is back, so a UI can say so instead of showing stale clusters as live.
        """
        inbox: queue.Queue[Message] = queue.Queue()
        cache = Cache()
        informers = self._start_informers(cache, inbox)
        view = QueueView(self.queues) if self.queues is not None else None
        if view is not None:
            view.refresh(cache, {"workloads"})
        last: dict[Key, ClusterInfo] = {}
        # Clusters the operator has not touched yet -> when to say it is silent. Nothing
        # arrives from Kubernetes at that moment, so they are re-derived on the clock.
        due: dict[Key, float] = {}
        health: str | None = None
        try:
            for key in sorted(cache.clusters):
                yield from self._emit(key, cache, last, due, view)
            for informer in informers:
                informer.start()
            while not stop.is_set():
                error = next((i.error for i in informers if i.error), None)
                if error != health and on_health is not None:
                    on_health(error)
                health = error
                try:
                    batch = [inbox.get(timeout=0.25)]
                except queue.Empty:
                    pass
                else:
                    # What arrived together is folded in together: a queue's positions
                    # are then read once for a burst of changes.
                    while True:
                        try:
                            batch.append(inbox.get_nowait())
                        except queue.Empty:
                            break
                    touched: set[Key] = set()
                    for message in batch:
                        touched |= cache.apply(message)
                    if view is not None:
                        touched |= view.refresh(cache, {m.kind for m in batch})
                    for key in sorted(touched):
                        yield from self._emit(key, cache, last, due, view)
                now = time.time()
                for key in sorted(k for k, at in due.items() if at <= now):
                    yield from self._emit(key, cache, last, due, view)
        finally:
            for informer in informers:
                informer.close()

    # --- connecting from outside the cluster --------------------------------------

    def client_address(self, info: ClusterInfo) -> str:
        """Where Ray Client reaches `info`: the head Service in a pod, else a port-forward."""
        return self._address(info, CLIENT_PORT, "ray")

    def driver_address(self, info: ClusterInfo) -> str | None:
        # In a pod of the same Kubernetes the kernel joins the cluster as a node that
        # offers nothing and drives it directly (joined_node.py); from outside (a laptop,
        # a port-forward) only Ray Client gets through.
        if not (in_cluster() and self.settings.options.kernel_joins_cluster):
            return None
        return f"{info.name}-head-svc.{info.namespace or self.namespace}.svc:{GCS_PORT}"

    def dashboard_address(self, info: ClusterInfo) -> str:
        return self._address(info, DASHBOARD_PORT, "http")

    def serve_address(self, info: ClusterInfo) -> str | None:
        return self._address(info, SERVE_PORT, "http") if info.endpoints.serve else None

    def metrics_address(self, info: ClusterInfo) -> str | None:
        return self._address(info, METRICS_PORT, "http") if info.endpoints.metrics else None

    def lasting_dashboard_address(self, info: ClusterInfo) -> str | None:
        # Outside the cluster, this process's port-forward ends with it.
        return self.dashboard_address(info) if in_cluster() else None

    def port_forward(self, name: str, port: int) -> tuple[str, int, Callable[[], None]]:
        """Forward a local port to `port` of the cluster's head pod, through the API server.

        Returns (local host, local port, close). Checked once up front, so that RBAC or
        an unreachable node is reported here rather than as a broken Ray Client
        connection later; each TCP connection then gets its own websocket, to the head
        pod of that moment.
        """
        relay = self._forward(name, port)
        return relay.host, relay.port, relay.close

    def _forward(self, name: str, port: int) -> Relay:
        from kubernetes import client
        from kubernetes.stream import portforward

        def open_remote() -> Any:
            head = self._running_head(name)
            # The client's portforward() swaps the ApiClient's call_api for a websocket
            # one while it opens: on the shared client, a watch or list in another
            # thread would go out as a port-forward ("Missing required parameter
            # `ports`"). So each opening gets an ApiClient of its own (the websocket
            # does not use its connection pool).
            with client.ApiClient(self.api.configuration) as own:
                core = client.CoreV1Api(own)
                # A websocket upgrade is a GET: RBAC checks `get` on pods/portforward.
                with api_errors(self._call("get", "pods/portforward", head)):
                    forward = portforward(core.connect_get_namespaced_pod_portforward, head,
                                          self.namespace, ports=str(port))  # fmt: skip
            return forward.socket(port)

        self._running_head(name)  # its own message, before any port-forward
        try:
            open_remote().close()
        except BackendUnavailable as exc:
            raise BackendUnavailable(
                f"cannot port-forward to cluster {name!r}: {exc.message}",
                detail="raylab reaches clusters from outside Kubernetes through the API "
                "server (as kubectl port-forward); the Role needs pods/portforward get, "
                "and the API server must reach the node's kubelet",
            ) from exc
        return Relay(open_remote)

    def _address(self, info: ClusterInfo, port: int, scheme: str) -> str:
        if in_cluster():
            return f"{scheme}://{info.name}-head-svc.{self.namespace}.svc:{port}"
        key = (self.server, self.namespace, info.name, port)
        with _forwards_lock:
            relay = _forwards.get(key)
            if relay is None or relay.closed:
                relay = _forwards[key] = self._forward(info.name, port)
        return f"{scheme}://{relay.host}:{relay.port}"

    # --- helpers ------------------------------------------------------------------

    def image_for(self, spec: ClusterSpec) -> tuple[str, str, str]:
        """(image, Ray version, Python minor) of a new cluster.

        The admin's or the user's image, else rayproject/ray matching this kernel, so
        that Ray Client can connect; the -gpu variant when workers have GPUs.
        """
        from ...versions import default_image, kernel_versions

        kernel_ray, kernel_python = kernel_versions()
        image = spec.image or self.settings.profiles.defaults.image
        if image:
            ray_version, python_version = versions_from_image(image)
            return image, ray_version or kernel_ray, python_version or kernel_python
        image = default_image(kernel_ray, kernel_python)
        return (f"{image}-gpu" if spec.gpus else image), kernel_ray, kernel_python

    def capacity(self, gpu_type: str, gpus: int) -> Capacity:
        """What `gpus` × `gpu_type` would get from its queue now (no queue: a Capacity
        without one)."""
        local_queue = self.settings.local_queue(gpu_type) if self.queues else ""
        if not local_queue or self.queues is None:
            return Capacity(gpu_type=gpu_type, gpus=gpus)
        return self.queues.capacity(self.namespace, local_queue, gpu_type, gpus)

    def _queue(self, obj: dict[str, Any]) -> QueueInfo | None:
        """Its place in Kueue's queue, read now; None when Kueue does not hold it."""
        if self.queues is None or not queue_of(obj):
            return None
        return self.queues.describe(obj)

    def _call(
        self, verb: str, resource: str, name: str | None = None, *, namespace: str | None = None
    ) -> Call:
        return Call(verb, resource, namespace or self.namespace, self.server, name)

    def _json(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
        return json.loads(method(*args, _preload_content=False, **kwargs).data)

    def _read(self, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = namespace or self.namespace
        try:
            with api_errors(self._call("get", PLURAL, name, namespace=ns)):
                obj: dict[str, Any] = self._json(
                    self.custom.get_namespaced_custom_object, *RAY, ns, PLURAL, name
                )
        except NotFound:  # (a missing RayCluster API is KubeRay missing, not this)
            return None
        labels = obj.get("metadata", {}).get("labels") or {}
        # Another tool's RayCluster in the same namespace is not raylab's to show.
        return obj if labels.get(MANAGED_BY_LABEL) == MANAGED_BY else None

    def _require(self, name: str, namespace: str | None = None) -> dict[str, Any]:
        ns = namespace or self.namespace
        obj = self._read(name, ns)
        if obj is None:
            raise NotFound(f"no cluster named {name!r} in namespace {ns!r}")
        return obj

    def _patch(self, name: str, body: Any, content_type: str, namespace: str) -> ClusterInfo:
        with api_errors(self._call("patch", PLURAL, name, namespace=namespace)):
            obj = self._json(self.custom.patch_namespaced_custom_object, *RAY, namespace,
                             PLURAL, name, body, _content_type=content_type)  # fmt: skip
        pods = self._pods(f"{RAY_PODS}={name}", namespace)
        return cluster_info(obj, pods, in_cluster=in_cluster(), queue=self._queue(obj))

    def _pods(self, selector: str, namespace: str | None = None) -> list[dict[str, Any]]:
        ns = namespace or self.namespace
        with api_errors(self._call("list", "pods", namespace=ns)):
            items: list[dict[str, Any]] = self._json(
                self.core.list_namespaced_pod, ns, label_selector=selector
            )["items"]
        return items

    def _warnings(self, name: str | None, namespace: str | None = None) -> list[dict[str, Any]]:
        """The operator's Warning events on RayClusters (on `name`, or on all of them).

        Optional reading: without the right to list events, refusals just show less.
        """
        ns = namespace or self.namespace
        selector = RAYCLUSTER_WARNINGS + (f",involvedObject.name={name}" if name else "")
        call = self._call("list", "events", namespace=ns)
        return self._optional_events(
            lambda **kw: self.core.list_namespaced_event(ns, field_selector=selector, **kw), call
        )

    def _running_head(self, name: str) -> str:
        heads = [p for p in self._pods(f"{RAY_PODS}={name},ray.io/node-type=head") if pod_ready(p)]
        if not heads:
            raise BackendUnavailable(
                f"cluster {name!r} has no running head pod to connect to",
                detail=f"`%raycluster status {name}` shows why",
            )
        return str(heads[0]["metadata"]["name"])

    def _start_informers(self, cache: Cache, inbox: queue.Queue[Message]) -> list[Informer]:
        """List everything once, here, so that errors (no KubeRay, RBAC) raise to the
        caller; the informers then watch from those resourceVersions. One set of three
        per watched namespace, or one cluster-wide set, all into the same queue."""
        informers = []
        for i, scope in enumerate(self.scopes):
            calls = self._list_calls(scope, f"{MANAGED_BY_LABEL}={MANAGED_BY}")
            if self.queues is not None:
                calls.update(self._kueue_calls(scope, first=i == 0))
            for kind, (list_call, call) in calls.items():
                try:
                    with api_errors(call):
                        body = self._json(list_call)
                except Forbidden:
                    if kind in ("events", "clusterqueues"):
                        continue  # optional: without them, refusals or usage show less
                    raise
                cache.apply(_synced(kind, body.get("items") or [], scope))
                version = str(body["metadata"]["resourceVersion"])
                informers.append(Informer(kind, list_call, inbox, version, _describer(call), scope))
        return informers

    def _list_calls(
        self, scope: str | None, selector: str
    ) -> dict[str, tuple[Callable[..., Any], Call]]:
        """The list (and watch) requests of RayClusters (matching `selector`), Ray pods
        and RayCluster warnings in namespace `scope`, or in every namespace for None."""
        custom, core = self.custom, self.core
        where = scope or ALL_NAMESPACES
        if scope is None:
            return {
                "rayclusters": (
                    lambda **kw: custom.list_cluster_custom_object(
                        *RAY, PLURAL, label_selector=selector, **kw
                    ),
                    self._call("list", PLURAL, namespace=where),
                ),
                "pods": (
                    lambda **kw: core.list_pod_for_all_namespaces(label_selector=RAY_PODS, **kw),
                    self._call("list", "pods", namespace=where),
                ),
                "events": (
                    lambda **kw: core.list_event_for_all_namespaces(
                        field_selector=RAYCLUSTER_WARNINGS, **kw
                    ),
                    self._call("list", "events", namespace=where),
                ),
            }
        return {
            "rayclusters": (
                lambda **kw: custom.list_namespaced_custom_object(
                    *RAY, scope, PLURAL, label_selector=selector, **kw
                ),
                self._call("list", PLURAL, namespace=where),
            ),
            "pods": (
                lambda **kw: core.list_namespaced_pod(scope, label_selector=RAY_PODS, **kw),
                self._call("list", "pods", namespace=where),
            ),
            "events": (
                lambda **kw: core.list_namespaced_event(
                    scope, field_selector=RAYCLUSTER_WARNINGS, **kw
                ),
                self._call("list", "events", namespace=where),
            ),
        }

    def _kueue_calls(
        self, scope: str | None, first: bool
    ) -> dict[str, tuple[Callable[..., Any], Call]]:
        """The Workloads of namespace `scope` (None: all), and once, the ClusterQueues
        (cluster-wide objects: their usage, which changes as anyone's cluster starts)."""
        custom = self.custom
        where = scope or ALL_NAMESPACES
        calls: dict[str, tuple[Callable[..., Any], Call]] = {
            "workloads": (
                (lambda **kw: custom.list_cluster_custom_object(*KUEUE, "workloads", **kw))
                if scope is None
                else (
                    lambda **kw: custom.list_namespaced_custom_object(
                        *KUEUE, scope, "workloads", **kw
                    )
                ),
                self._call("list", "workloads", namespace=where),
            )
        }
        if first:
            calls["clusterqueues"] = (
                lambda **kw: custom.list_cluster_custom_object(*KUEUE, "clusterqueues", **kw),
                self._call("list", "clusterqueues", namespace=ALL_NAMESPACES),
            )
        return calls

    def _optional_events(self, list_call: Callable[..., Any], call: Call) -> list[dict[str, Any]]:
        """Warning events, optional reading: without the right to list them, refusals
        just show less."""
        try:
            with api_errors(call):
                items: list[dict[str, Any]] = self._json(list_call)["items"]
        except Forbidden:
            return []
        return items

    def _emit(
        self,
        key: Key,
        cache: Cache,
        last: dict[Key, ClusterInfo],
        due: dict[Key, float],
        view: QueueView | None = None,
    ) -> Iterator[ClusterEvent]:
        obj = cache.clusters.get(key)
        before = last.get(key)
        due.pop(key, None)
        if obj is None:
            if before is not None:
                del last[key]
                yield ClusterEvent("DELETED", before)
            return
        now = time.time()
        deadline = operator_deadline(obj)
        if deadline is not None and deadline > now:
            due[key] = deadline
        queued = view.info(key, cache) if view is not None else None
        info = cluster_info(obj, cache.pods_of(key), cache.warnings_of(key),
                            in_cluster=in_cluster(), now=now, queue=queued)  # fmt: skip
        if info == before:
            return
        last[key] = info
        yield ClusterEvent("ADDED" if before is None else "MODIFIED", info)


def _annotation_path(key: str, section: str = "annotations") -> str:
    """The JSON-patch path of an annotation (or label): RFC 6901 escapes `~` and `/`."""
    return f"/metadata/{section}/" + key.replace("~", "~0").replace("/", "~1")


def _synced(kind: str, items: list[dict[str, Any]], namespace: str | None = None) -> Message:
    from .watch import Synced

    return Synced(kind, items, namespace)


def _describer(call: Call) -> Callable[[BaseException], str]:
    def describe(exc: BaseException) -> str:
        error = translate(exc, call)
        return error.message if error is not None else f"{type(exc).__name__}: {exc}"

    return describe


def _maybe_refused(obj: dict[str, Any]) -> bool:
    """The operator has not accepted this generation yet: worth reading its warnings."""
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    return observed is None or observed < (obj.get("metadata", {}).get("generation") or 0)


def _name(obj: dict[str, Any]) -> str:
    return str(obj.get("metadata", {}).get("name") or "")


__all__ = ["KubeRayBackend"]
