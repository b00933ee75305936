"""Kueue in the test control plane: fixtures that run it, and the usual queues.

The controller is the real one (``ControlPlane.start_kueue``, see harness/README.md):
webhooks, admission, preemption and the visibility API behave as in a cluster. Kueue
is on only for the modules that ask for it; in a test module::

    from .kueue_support import kueue, kueue_queues  # noqa: F401  (fixtures)

    pytestmark = pytest.mark.usefixtures("kueue_queues")

    def test_x(namespace: str, admin_api) -> None:
        create_local_queue(admin_api, namespace)  # "team" -> ClusterQueue "gpus"
        ...  # a RayCluster labelled kueue.x-k8s.io/queue-name: team is queued

The objects (all idempotent to create):

- ResourceFlavors ``default-flavor`` (no labels: cpu, memory) and ``a100`` (nodes
  labelled ``raylab.io/gpu-type=a100``, with the GPU taint's toleration, so admitted
  pods land on the KWOK A100 nodes);
- ClusterQueue ``gpus``: cpu and memory over default-flavor (far more than the
  nodes have), ``nvidia.com/gpu`` over a100 with a nominal quota of 16 (the two A100
  nodes); preemption within the queue of lower-priority workloads;
- WorkloadPriorityClasses ``low`` (100) and ``high`` (1000), which a workload takes
  from the label ``kueue.x-k8s.io/priority-class``;
- a LocalQueue ``team`` in a test's namespace, pointing at ``gpus``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import GPU_RESOURCE, ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from tests.ci import cannot_run

from .kuberay_support import GPU_TOLERATION
from .kuberay_support import kwok_raycluster as plain_raycluster

KUEUE = ("kueue.x-k8s.io", "v1beta2")
VISIBILITY = ("visibility.kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
DEFAULT_FLAVOR = "default-flavor"
A100_FLAVOR = "a100"
CLUSTER_QUEUE = "gpus"
LOCAL_QUEUE = "team"
A100_GPU_QUOTA = 16  # both KWOK A100 nodes
PRIORITY_CLASSES = {"low": 100, "high": 1000}


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def kueue(control_plane: ControlPlane) -> Iterator[ControlPlane]:
    """Kueue running for this module (a few seconds to start), stopped after it."""
    if control_plane.process_nodes_unavailable is not None:
        cannot_run(f"Kueue runs on a process node: {control_plane.process_nodes_unavailable}")
    control_plane.start_kueue()
    try:
        yield control_plane
    finally:
        control_plane.stop_kueue()


@pytest.fixture(scope="module")
def kueue_queues(kueue: ControlPlane) -> Iterator[str]:
    """The flavors, ClusterQueue and priority classes above; the ClusterQueue's name.

    Deleted after the module, while Kueue still runs (it holds them with finalizers
    until no Workload uses them: the tests' namespaces go first).
    """
    with kueue.api_client() as api:
        create_queues(api)
        try:
            yield CLUSTER_QUEUE
        finally:
            delete_queues(api)


# ----------------------------------------------------------------------------- objects


def _custom(api: k8s_client.ApiClient) -> k8s_client.CustomObjectsApi:
    return k8s_client.CustomObjectsApi(api)


def resource_flavors() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "ResourceFlavor",
            "metadata": {"name": DEFAULT_FLAVOR},
            "spec": {},
        },
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "ResourceFlavor",
            "metadata": {"name": A100_FLAVOR},
            # Kueue adds both to the pods of what it admits on this flavor.
            "spec": {
                "nodeLabels": {"raylab.io/gpu-type": "a100"},
                "tolerations": [dict(GPU_TOLERATION)],
            },
        },
    ]


def cluster_queue(name: str = CLUSTER_QUEUE, gpus: int = A100_GPU_QUOTA) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},  # every namespace (null would be none)
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [
                        {
                            "name": DEFAULT_FLAVOR,
                            "resources": [
                                {"name": "cpu", "nominalQuota": "1000"},
                                {"name": "memory", "nominalQuota": "10Ti"},
                            ],
                        }
                    ],
                },
                {
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [
                        {
                            "name": A100_FLAVOR,
                            "resources": [{"name": GPU_RESOURCE, "nominalQuota": str(gpus)}],
                        }
                    ],
                },
            ],
        },
    }


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "/".join(KUEUE),
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": f"raylab tests: {name} priority",
        }
        for name, value in PRIORITY_CLASSES.items()
    ]


def local_queue(
    namespace: str, name: str = LOCAL_QUEUE, cluster_queue: str = CLUSTER_QUEUE
) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }


_PLURALS = {
    "ResourceFlavor": "resourceflavors",
    "ClusterQueue": "clusterqueues",
    "Cohort": "cohorts",
    "WorkloadPriorityClass": "workloadpriorityclasses",
    "LocalQueue": "localqueues",
    "AdmissionCheck": "admissionchecks",
    "Topology": "topologies",
    "Workload": "workloads",
}


def ensure(api: k8s_client.ApiClient, body: dict[str, Any]) -> None:
    """Create a Kueue object (namespaced if its metadata names a namespace), or bring an
    existing one's spec (or a priority class's value) to ``body``'s."""
    custom = _custom(api)
    group, version = body["apiVersion"].split("/")
    plural = _PLURALS[body["kind"]]
    meta = body["metadata"]
    namespace = meta.get("namespace")
    where = (group, version, namespace, plural) if namespace else (group, version, plural)
    try:
        if namespace:
            call_json(custom.create_namespaced_custom_object, *where, body)
        else:
            call_json(custom.create_cluster_custom_object, *where, body)
    except ApiException as exc:
        if exc.status != HTTPStatus.CONFLICT:
            raise
        patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata")}
        if namespace:
            call_json(custom.patch_namespaced_custom_object, *where, meta["name"], patch)
        else:
            call_json(custom.patch_cluster_custom_object, *where, meta["name"], patch)


def create_queues(api: k8s_client.ApiClient, namespace: str | None = None) -> None:
    """Flavors, priority classes, ClusterQueue, and the LocalQueue if ``namespace``."""
    for body in [*resource_flavors(), *priority_classes(), cluster_queue()]:
        ensure(api, body)
    if namespace is not None:
        create_local_queue(api, namespace)


def create_local_queue(api: k8s_client.ApiClient, namespace: str, name: str = LOCAL_QUEUE) -> None:
    ensure(api, local_queue(namespace, name))


def delete_queues(
    api: k8s_client.ApiClient, namespace: str | None = None, timeout: float = 90.0
) -> None:
    """Delete what ``create_queues`` made and wait until it is gone.

    A ClusterQueue goes once no admitted Workload is left in it, a flavor once no
    ClusterQueue names it: Kueue must run, and the namespaces of the tests' clusters
    be deleted (or deleting), or this times out.
    """
    custom = _custom(api)
    if namespace is not None:
        with contextlib.suppress(ApiException):
            call_json(
                custom.delete_namespaced_custom_object,
                *KUEUE,
                namespace,
                "localqueues",
                LOCAL_QUEUE,
            )
    steps = [[cluster_queue()], [*resource_flavors(), *priority_classes()]]
    for step in steps:  # the ClusterQueue before the flavors it names
        for body in step:
            plural = _PLURALS[body["kind"]]
            with contextlib.suppress(ApiException):
                call_json(
                    custom.delete_cluster_custom_object, *KUEUE, plural, body["metadata"]["name"]
                )
        for body in step:
            plural, name = _PLURALS[body["kind"]], body["metadata"]["name"]
            wait_until(
                f"{body['kind']} {name} gone", partial(_gone, custom, plural, name), timeout, 0.5
            )


# ------------------------------------------------------------- the documented objects

KUEUE_DOC = Path(__file__).resolve().parents[2] / "docs" / "kueue.md"


def documented_objects() -> list[dict[str, Any]]:
    """docs/kueue.md's Kubernetes objects, in order: what an admin is told to apply (its
    other YAML, the Z2JH values, is no object)."""
    text = KUEUE_DOC.read_text()
    blocks = [yaml.safe_load(part.split("```", 1)[0]) for part in text.split("```yaml\n")[1:]]
    return [b for b in blocks if isinstance(b, dict) and "kind" in b]


def apply_documented(api: k8s_client.ApiClient, namespaces: list[str]) -> None:
    """The documented flavors, ClusterQueue and priority classes, and the LocalQueue in
    each of `namespaces`."""
    objects = [d for d in documented_objects() if d["apiVersion"].startswith(KUEUE[0])]
    for doc in objects:
        if doc["kind"] != "LocalQueue":
            ensure(api, doc)
    local = next(d for d in objects if d["kind"] == "LocalQueue")
    for namespace in namespaces:
        ensure(api, {**local, "metadata": {**local["metadata"], "namespace": namespace}})
    # Kueue takes a moment to take them in (until then its visibility API does not know
    # them): ready once each says Active.
    custom = _custom(api)
    cq = next(d for d in objects if d["kind"] == "ClusterQueue")["metadata"]["name"]

    def cq_active() -> bool:
        obj = call_json(custom.get_cluster_custom_object, *KUEUE, "clusterqueues", cq)
        return condition(obj, "Active") == "True"

    def lq_active(namespace: str, name: str) -> bool:
        obj = call_json(custom.get_namespaced_custom_object, *KUEUE, namespace, "localqueues",
                        name)  # fmt: skip
        return condition(obj, "Active") == "True"

    wait_until(f"ClusterQueue {cq} Active", cq_active, 60, 0.2)
    name = local["metadata"]["name"]
    for namespace in namespaces:
        wait_until(f"LocalQueue {namespace}/{name} Active", partial(lq_active, namespace, name),
                   60, 0.2)  # fmt: skip


def delete_documented(api: k8s_client.ApiClient, timeout: float = 90.0) -> None:
    """Remove what apply_documented made (its namespaces' LocalQueues go with them)."""
    custom = _custom(api)
    objects = [d for d in documented_objects() if d["apiVersion"].startswith(KUEUE[0])]
    order = ["ClusterQueue", "ResourceFlavor", "WorkloadPriorityClass"]
    for kind in order:  # the ClusterQueue before the flavors it names
        for doc in (d for d in objects if d["kind"] == kind):
            plural, name = _PLURALS[kind], doc["metadata"]["name"]
            with contextlib.suppress(ApiException):
                call_json(custom.delete_cluster_custom_object, *KUEUE, plural, name)
            wait_until(f"{kind} {name} gone", partial(_gone, custom, plural, name), timeout, 0.5)


def bind_queue_viewer(api: k8s_client.ApiClient, users: list[str], replace: bool = False) -> None:
    """The documented raylab-queue-viewer ClusterRole, bound to `users` (with `replace`,
    to them alone, where it was bound before)."""
    rbac = k8s_client.RbacAuthorizationV1Api(api)
    for doc in documented_objects():
        if doc["kind"] == "ClusterRoleBinding":
            doc["subjects"] = [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": u} for u in users
            ]
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding"):
            create = (
                rbac.create_cluster_role
                if doc["kind"] == "ClusterRole"
                else rbac.create_cluster_role_binding
            )
            try:
                call_json(create, doc)
            except ApiException as exc:
                if exc.status != HTTPStatus.CONFLICT:
                    raise
                if replace and doc["kind"] == "ClusterRoleBinding":
                    patch = {"subjects": doc["subjects"]}
                    call_json(rbac.patch_cluster_role_binding, doc["metadata"]["name"], patch)


def unbind_queue_viewer(api: k8s_client.ApiClient) -> None:
    """Remove what bind_queue_viewer made (a module after this one may install the chart,
    whose own ClusterRole has the same name where its fullname is raylab)."""
    rbac = k8s_client.RbacAuthorizationV1Api(api)
    for doc in documented_objects():
        deletes = {"ClusterRole": rbac.delete_cluster_role,
                   "ClusterRoleBinding": rbac.delete_cluster_role_binding}  # fmt: skip
        delete = deletes.get(doc["kind"])
        if delete is not None:
            with contextlib.suppress(ApiException):
                call_json(delete, doc["metadata"]["name"])


def _gone(custom: k8s_client.CustomObjectsApi, plural: str, name: str) -> bool:
    try:
        call_json(custom.get_cluster_custom_object, *KUEUE, plural, name)
    except ApiException as exc:
        if exc.status == HTTPStatus.NOT_FOUND:
            return True
        raise
    return False


# ------------------------------------------------------------------- what Kueue shows


def workload_for(
    api: k8s_client.ApiClient, namespace: str, name: str, kind: str = "RayCluster"
) -> dict[str, Any] | None:
    """The Workload Kueue made for the ``kind`` object ``name`` (its owner), if any."""
    items = call_json(_custom(api).list_namespaced_custom_object, *KUEUE, namespace, "workloads")[
        "items"
    ]
    for workload in items:
        owners = workload["metadata"].get("ownerReferences") or []
        if any(o["kind"] == kind and o["name"] == name for o in owners):
            return dict(workload)
    return None


def condition(obj: dict[str, Any], type_: str) -> str | None:
    """The status ("True", "False") of a condition, or None when absent."""
    for c in obj.get("status", {}).get("conditions") or []:
        if c["type"] == type_:
            return str(c["status"])
    return None


def is_admitted(workload: dict[str, Any] | None) -> bool:
    return workload is not None and condition(workload, "Admitted") == "True"


def is_pending(workload: dict[str, Any] | None) -> bool:
    """Queued, without quota (Kueue says why in the QuotaReserved condition)."""
    return workload is not None and condition(workload, "QuotaReserved") == "False"


def pending_workloads(
    api: k8s_client.ApiClient, namespace: str, local_queue: str = LOCAL_QUEUE
) -> list[dict[str, Any]]:
    """What the visibility API lists as pending in a LocalQueue, in queue order."""
    path = (
        f"/apis/{'/'.join(VISIBILITY)}/namespaces/{namespace}"
        f"/localqueues/{local_queue}/pendingworkloads"
    )
    method, url, headers, _, _ = api.param_serialize(
        "GET", path, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    data: bytes = response.read()  # type: ignore[no-untyped-call]  # the client's
    if response.status != HTTPStatus.OK:
        raise ApiException(status=response.status, reason=data.decode(errors="replace"))
    return list(json.loads(data)["items"])


# ---------------------------------------------------------------------- ray clusters


def kwok_raycluster(
    name: str,
    gpus: int = 8,
    gpu_type: str = "a100",
    queue: str | None = LOCAL_QUEUE,
    priority_class: str | None = None,
) -> dict[str, Any]:
    """kuberay_support.kwok_raycluster with ``gpus`` GPUs, queued in ``queue`` (None:
    not Kueue's) at ``priority_class``."""
    labels = {}
    if queue is not None:
        labels[QUEUE_LABEL] = queue
    if priority_class is not None:
        labels[PRIORITY_LABEL] = priority_class
    return plain_raycluster(name, gpus, gpu_type, labels)
