"""Each quota at its edge, with clusters already in use, on the real API server (KWOK pods
cost nothing, so "in use" is cheap here), with a custom `c.Raylab.gpu_types`.

alice works through `ClusterService`, the rules every door shares; carol is an admin by
group only.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from controlplane import call_json, wait_until
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import SPEC_ANNOTATION
from raylab.culler.ledger import Meter
from raylab.culler.ledger_store import LocalLedger
from raylab.errors import QuotaExceeded, SpecError
from raylab.identity import is_admin
from raylab.model import Phase
from raylab.service import ClusterService, quota_use

from .kuberay_support import RAY, grant, new_namespace, settings

SETTINGS = settings(
    max_gpus_per_user=4,
    max_clusters_per_user=2,
    max_workers_per_cluster=2,
    admin_groups=["platform"],
    gpu_types={
        "t4": {"description": "NVIDIA T4", "node_selector": {"raylab.io/gpu-type": "a100"},
               "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                "effect": "NoSchedule"}],
               "max_gpus_per_worker": 2, "default_cpus": "1", "default_memory": "1Gi"},
        "cpu": {"description": "CPU only", "max_gpus_per_worker": 0,
                "default_cpus": "1", "default_memory": "1Gi"},
    },
    default_gpu_type="t4",
)  # fmt: skip


@contextmanager
def alice_in_a_new_namespace(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient, prefix: str
) -> Iterator[ClusterService]:
    with new_namespace(admin_api, prefix) as namespace:
        grant(admin_api, namespace, "alice")
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)
        yield ClusterService(backend, SETTINGS, "alice")


@pytest.fixture(scope="module")
def alice(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> Iterator[ClusterService]:
    with alice_in_a_new_namespace(admin_api, alice_api, "rl-quota") as service:
        yield service


def test_each_quota_at_its_edge_with_clusters_in_use(alice: ClusterService) -> None:
    # The admin's GPU types replace the built-in set.
    with pytest.raises(SpecError, match="unknown GPU type 'a100'"):
        alice.create({"name": "q0", "gpu_type": "a100", "gpus": 1, "workers": 1})
    # Workers per cluster: the limit itself is allowed, one more is not.
    with pytest.raises(QuotaExceeded, match="3 workers requested, the limit is 2") as err:
        alice.create({"name": "q0", "gpus": 0, "gpu_type": "cpu", "workers": 3})
    assert err.value.field == "workers"
    first, _ = alice.create({"name": "q1", "gpus": 2, "workers": 2})  # 2 of 4 GPUs
    assert first.spec.gpu_type == "t4"
    # GPUs: one more than what is left is refused, with what is in use; exactly what is
    # left is allowed.
    with pytest.raises(QuotaExceeded) as err:
        alice.create({"name": "q2", "gpus": 4, "workers": 2})
    assert str(err.value) == "4 GPUs requested, quota is 4 and 2 are in use"
    assert err.value.field == "gpus"
    alice.create({"name": "q2", "gpus": 2, "workers": 1})  # 4 of 4
    # Clusters: two of two in use, a third (even without GPUs) is refused.
    with pytest.raises(QuotaExceeded, match="you have 2 clusters, the limit is 2"):
        alice.create({"name": "q3", "gpus": 0, "gpu_type": "cpu", "workers": 0})
    # Scaling counts the cluster's new size against what the others use: q2 has 2 GPUs
    # per worker, so 2 workers ask for 4 while q1 holds 2.
    with pytest.raises(QuotaExceeded, match="4 GPUs requested, quota is 4 and 2 are in use"):
        alice.scale("q2", 2)
    with pytest.raises(QuotaExceeded, match="3 workers requested, the limit is 2"):
        alice.scale("q1", 3)
    assert [c.name for c in alice.list()] == ["q1", "q2"]
    assert (alice.get("q1").workers_desired, alice.get("q2").workers_desired) == (2, 1)


def test_an_admin_by_group_manages_everyone(alice: ClusterService) -> None:
    assert is_admin(SETTINGS, "carol", ["ml", "platform"])
    carol = ClusterService(alice.backend, SETTINGS, "carol", admin=True)
    assert {c.name for c in carol.list(everyone=True)} >= {"q1", "q2"}
    bob = ClusterService(alice.backend, SETTINGS, "bob", admin=is_admin(SETTINGS, "bob", ["ml"]))
    assert bob.list(everyone=True) == []


# --- what a cluster holds: read from the RayCluster's pod templates and replicas ----------


@pytest.fixture
def fresh(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> Iterator[ClusterService]:
    """alice, with none of her clusters in use yet."""
    with alice_in_a_new_namespace(admin_api, alice_api, "rl-hold") as service:
        yield service


def patch(api: k8s_client.ApiClient, service: ClusterService, name: str, body: Any) -> None:
    """A write to the RayCluster as `kubectl` makes it (a JSON list is a JSON patch)."""
    kind = "json-patch" if isinstance(body, list) else "merge-patch"
    custom = k8s_client.CustomObjectsApi(api)
    namespace = service.get(name).namespace
    call_json(custom.patch_namespaced_custom_object, *RAY, namespace, "rayclusters", name,
              body, _content_type=f"application/{kind}+json")  # fmt: skip


def test_editing_the_spec_annotation_frees_no_quota_and_bills_the_pods(
    fresh: ClusterService, alice_api: k8s_client.ApiClient, tmp_path: Path
) -> None:
    alice = fresh
    alice.create({"name": "mine", "gpus": 2, "workers": 1})  # 2 GPUs of 4
    # alice (her own Role allows patch) rewrites raylab's record to claim no GPUs.
    claim = {**alice.get("mine").spec.to_json(), "gpus": 0}
    annotation = json.dumps(claim, sort_keys=True, separators=(",", ":"))
    patch(alice_api, alice, "mine", {"metadata": {"annotations": {SPEC_ANNOTATION: annotation}}})

    info = wait_until(
        "mine Ready", lambda: (i := alice.get("mine")).phase == Phase.READY and i, 90, 0.2
    )
    # The pods still request 2 GPUs: that is what it holds, shows and is billed.
    assert (info.spec.gpus, info.gpus, info.quota_gpus) == (2, 2, 2)
    assert quota_use(SETTINGS, alice.list()).gpus_used == 2
    with pytest.raises(QuotaExceeded, match="4 GPUs requested, quota is 4 and 2 are in use"):
        alice.create({"name": "more", "gpus": 4, "workers": 2})
    meter = Meter(LocalLedger(tmp_path), flush_s=1e9, retention_s=1e9, max_gap_s=60)
    now = time.time()
    meter.observe([info], now)
    billed = meter.observe([info], now + 3600)
    assert billed == {("alice", "t4"): 2 * 3600.0}  # an hour of 2 GPUs


def test_an_autoscaling_cluster_counts_at_its_max_replicas_even_at_zero(
    fresh: ClusterService, admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> None:
    alice = fresh
    made, _ = alice.create(
        {"name": "auto", "gpus": 2, "workers": 1, "min_workers": 0, "max_workers": 2}
    )
    assert made.quota_gpus == 4  # 2 per worker, up to 2 workers
    refused = "2 GPUs requested, quota is 4 and 4 are in use"
    with pytest.raises(QuotaExceeded, match=refused):
        alice.create({"name": "one", "gpus": 2, "workers": 1})
    # The autoscaler (through its own service account) takes the group to zero.
    replicas = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/replicas", "value": 0}]
    patch(admin_api, alice, "auto", replicas)
    idle = alice.get("auto")
    assert (idle.workers_desired, idle.gpus, idle.quota_gpus) == (0, 0, 4)
    with pytest.raises(QuotaExceeded, match=refused):
        alice.create({"name": "one", "gpus": 2, "workers": 1})
    # alice widens the range behind raylab's back: the object's maxReplicas counts.
    wider = [{"op": "replace", "path": "/spec/workerGroupSpecs/0/maxReplicas", "value": 3}]
    patch(alice_api, alice, "auto", wider)
    assert alice.get("auto").quota_gpus == 6
    assert alice.get("auto").spec.max_workers == 3
    with pytest.raises(QuotaExceeded, match="2 GPUs requested, quota is 4 and 6 are in use"):
        alice.create({"name": "one", "gpus": 2, "workers": 1})
