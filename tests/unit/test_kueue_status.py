"""What a cluster Kueue holds shows as, from the objects Kueue writes (shapes as Kueue
v0.17 writes them; the real controller drives tests/kubernetes/test_kueue.py)."""

from __future__ import annotations

from typing import Any

import pytest

from raylab.backends.kuberay.kueue import cluster_queue_gpus, gpus_of, queue_info
from raylab.backends.kuberay.status import derive_status
from raylab.errors import SpecError
from raylab.model import Capacity, Phase, QueueInfo, ordinal
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec


def raycluster(*, suspend: bool, suspended: bool, queue: str = "team") -> dict[str, Any]:
    conditions = [{"type": "RayClusterSuspended", "status": "True" if suspended else "False"}]
    return {
        "metadata": {
            "name": "big",
            "namespace": "ray-bob",
            "uid": "u-big",
            "labels": {"kueue.x-k8s.io/queue-name": queue, "kueue.x-k8s.io/priority-class": "low"},
        },
        "spec": {"suspend": suspend, "workerGroupSpecs": [{"groupName": "workers", "replicas": 1}]},
        "status": {"conditions": conditions, "observedGeneration": 1},
    }


def workload(name: str, namespace: str, gpus: int, **status: Any) -> dict[str, Any]:
    container = {"name": "ray-worker", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "queueName": "team",
            "podSets": [
                {"name": "head", "count": 1, "template": {"spec": {"containers": [{}]}}},
                {"name": "workers", "count": 1, "template": {"spec": {"containers": [container]}}},
            ],
            **status.pop("spec", {}),
        },
        "status": status,
    }


PENDING_REASON = {
    "type": "QuotaReserved",
    "status": "False",
    "reason": "Pending",
    "message": "couldn't assign flavors to pod set workers: insufficient unused quota",
}
FULL_CQ = {
    "spec": {
        "resourceGroups": [
            {"flavors": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu",
                                                         "nominalQuota": 16}]}]}
        ]
    },
    "status": {"flavorsReservation": [{"name": "a100", "resources": [{"name": "nvidia.com/gpu",
                                                                      "total": "16"}]}]},
}  # fmt: skip


def test_a_waiting_cluster_shows_its_place_what_is_ahead_and_the_queue_s_use() -> None:
    mine = workload("raycluster-big-1", "ray-bob", 8, conditions=[PENDING_REASON])
    ahead = workload("raycluster-exp-1", "ray-carol", 8, conditions=[PENDING_REASON])
    pending = [
        {"metadata": {"name": "raycluster-exp-1", "namespace": "ray-carol"},
         "positionInClusterQueue": 0},
        {"metadata": {"name": "raycluster-big-1", "namespace": "ray-bob"},
         "positionInClusterQueue": 1},
    ]  # fmt: skip
    gpus = {("ray-carol", "raycluster-exp-1"): gpus_of(ahead)}
    obj = raycluster(suspend=True, suspended=True)
    queue = queue_info(obj, mine, cluster_queue="gpus", pending=pending,
                       gpus_by_workload=gpus, cq=FULL_CQ)  # fmt: skip
    assert queue is not None
    assert (queue.position, queue.ahead, queue.ahead_gpus) == (2, 1, 8)
    status = derive_status(obj, queue=queue)
    assert status.phase == Phase.QUEUED
    assert status.reason == "2nd in gpus (8 GPUs ahead of you; 16 in use of 16)"
    # Without the right to read the other user's Workload: clusters, not GPUs.
    unknown = queue_info(obj, mine, cluster_queue="gpus", pending=pending, cq=FULL_CQ)
    assert unknown is not None
    assert unknown.place() == "2nd in gpus (1 cluster ahead of you; 16 in use of 16)"
    # Without the visibility API either: Kueue's own word on why it waits.
    bare = queue_info(obj, mine, cluster_queue="gpus")
    assert derive_status(obj, queue=bare).reason == (
        "waiting in gpus: couldn't assign flavors to pod set workers: insufficient unused quota"
    )


def test_admitted_preempted_and_suspended_by_its_owner() -> None:
    obj = raycluster(suspend=True, suspended=True)
    admitted = workload("w", "ray-bob", 8, conditions=[
        {"type": "QuotaReserved", "status": "True"}, {"type": "Admitted", "status": "True"}
    ], admission={"clusterQueue": "gpus"})  # fmt: skip
    queue = queue_info(obj, admitted)
    assert queue is not None
    assert queue.state == "Admitted"
    # Kueue has admitted it and is about to unsuspend it.
    assert derive_status(obj, queue=queue).phase == Phase.STARTING
    # Once running, the usual phases (no pods here: the head is awaited).
    running = raycluster(suspend=False, suspended=False)
    assert derive_status(running, queue=queue_info(running, admitted)).phase == Phase.PENDING

    preempted = workload("w", "ray-bob", 8, conditions=[
        PENDING_REASON,
        {"type": "Evicted", "status": "True", "reason": "Preempted",
         "message": "Preempted to accommodate a workload (UID: x) due to prioritization"},
    ])  # fmt: skip
    status = derive_status(obj, queue=queue_info(obj, preempted))
    assert status.phase == Phase.QUEUED
    assert status.reason.startswith("preempted by Kueue (Preempted to accommodate a workload")
    assert "back in the queue" in status.reason

    off = workload("w", "ray-bob", 8, spec={"active": False}, conditions=[PENDING_REASON])
    status = derive_status(obj, queue=queue_info(obj, off))
    assert status.phase == Phase.SUSPENDED
    assert status.reason == "suspended: no pods running, out of Kueue queue team"


def test_a_cluster_kueue_has_not_seen_yet_and_one_it_does_not_hold() -> None:
    obj = raycluster(suspend=True, suspended=False)
    status = derive_status(obj, queue=queue_info(obj, None))
    assert (status.phase, status.reason) == (Phase.QUEUED, "waiting in team: waiting for Kueue "
                                             "to queue it")  # fmt: skip
    plain = raycluster(suspend=True, suspended=True, queue="")
    assert queue_info(plain, None) is None
    assert derive_status(plain).phase == Phase.SUSPENDED


def test_cluster_queue_usage_and_capacity_lines() -> None:
    assert cluster_queue_gpus(FULL_CQ) == (16, 16)
    free = Capacity(gpu_type="a100", gpus=4, queue="team", cluster_queue="gpus",
                    gpus_in_use=8, gpus_quota=16, waiting=0, waiting_gpus=0)  # fmt: skip
    assert free.text() == "4 × a100: free now (8 in use of 16 in gpus)"
    busy = Capacity(gpu_type="a100", gpus=8, queue="team", cluster_queue="gpus",
                    gpus_in_use=16, gpus_quota=16, waiting=1, waiting_gpus=8)  # fmt: skip
    assert (
        busy.text() == "8 × a100: queued: 8 GPUs ahead; 1 cluster waiting; 16 in use of 16 in gpus"
    )
    too_big = Capacity(gpu_type="a100", gpus=32, queue="team", cluster_queue="gpus",
                       gpus_in_use=0, gpus_quota=16, waiting=0)  # fmt: skip
    assert "more than gpus's whole quota of 16 GPUs" in too_big.text()
    assert Capacity(gpu_type="a100", gpus=4).text().endswith("no queue here; it starts as soon "
                                                              "as Kubernetes has room")  # fmt: skip


@pytest.mark.parametrize(("n", "text"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"),
                                         (11, "11th"), (12, "12th"), (13, "13th"), (21, "21st"),
                                         (102, "102nd")])  # fmt: skip
def test_ordinals(n: int, text: str) -> None:
    assert ordinal(n) == text


@pytest.mark.parametrize("bad", ["High", "a b", "x" * 300, "-x", 5, "p\n"])
def test_a_priority_that_is_no_class_name_is_refused(bad: object) -> None:
    with pytest.raises(SpecError) as caught:
        ClusterSpec.from_mapping({"priority": bad, "gpus": 0, "gpu_type": "cpu"}, Profiles())
    assert caught.value.field == "priority"


def test_queue_info_survives_the_rest_api_round_trip() -> None:
    queue = QueueInfo(name="team", cluster_queue="gpus", position=1, ahead=0)
    assert QueueInfo.from_json(queue.to_json()) == queue
    assert QueueInfo.from_json({"name": 3}) is None
