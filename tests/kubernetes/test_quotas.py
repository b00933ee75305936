"""Each quota at its edge, with clusters already in use, on the real API server (KWOK pods
cost nothing, so "in use" is cheap here), with a custom `c.Raylab.gpu_types`.

alice works through `ClusterService`, the rules every door shares; carol is an admin by
group only.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.errors import QuotaExceeded, SpecError
from raylab.identity import is_admin
from raylab.service import ClusterService

from .kuberay_support import grant, new_namespace, settings

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


@pytest.fixture(scope="module")
def alice(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> Iterator[ClusterService]:
    with new_namespace(admin_api, "rl-quota") as namespace:
        grant(admin_api, namespace, "alice")
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=namespace)
        yield ClusterService(backend, SETTINGS, "alice")


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
