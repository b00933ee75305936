"""Phase from conditions and pods, for states the fake nodes cannot produce.

KWOK pods never crash-loop or fail to pull an image, so these cases are written as the
API server returns them (plain dicts, the shape of `kubectl get -o json`); every state
the fake nodes can reach is covered against the real operator in test_kuberay_backend.
"""

from __future__ import annotations

import copy
import json
import time
from datetime import datetime
from typing import Any

from raylab.backends.kuberay.manifest import SPEC_ANNOTATION, raycluster_manifest
from raylab.backends.kuberay.status import (
    OPERATOR_GRACE_S,
    cluster_info,
    derive_status,
    operator_deadline,
)
from raylab.model import Phase
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec

PROFILES = Profiles()
CREATED = datetime.fromisoformat("2026-01-01T00:00:00+00:00").timestamp()


def raycluster(workers: int = 2, **status: Any) -> dict[str, Any]:
    s = ClusterSpec.from_mapping({"name": "c", "gpus": 2 * workers, "workers": workers}, PROFILES)
    obj = raycluster_manifest(s, PROFILES.gpu_types["a100"], owner="alice", namespace="ml",
                              image="rayproject/ray:2.60.0-py311-gpu",
                              ray_version="2.60.0")  # fmt: skip
    obj["metadata"].update(generation=1, creationTimestamp="2026-01-01T00:00:00Z")
    if status:
        obj["status"] = status
    return obj


def accepted(*conditions: tuple[str, str], **extra: Any) -> dict[str, Any]:
    return {
        "observedGeneration": 1,
        "conditions": [{"type": t, "status": s} for t, s in conditions],
        **extra,
    }


def pod(kind: str, ready: bool = True, waiting: str | None = None) -> dict[str, Any]:
    state = {"waiting": {"reason": waiting, "message": "back-off pulling"}} if waiting else {}
    return {
        "metadata": {"name": f"c-{kind}-x", "labels": {"ray.io/node-type": kind}},
        "status": {
            "phase": "Running" if ready else "Pending",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": [{"name": "ray", "state": state}],
        },
    }


def test_a_fresh_object_without_status_is_pending() -> None:
    info = cluster_info(raycluster(), now=CREATED + 1)
    assert (info.phase, info.reason) == (
        Phase.PENDING,
        "waiting for the KubeRay operator to create the head",
    )
    assert (info.workers_desired, info.gpus, info.owner) == (2, 4, "alice")
    assert info.endpoints.client is None


def test_state_ready_alone_means_nothing() -> None:
    # The deprecated, sticky .status.state: never read.
    obj = raycluster(state="ready", observedGeneration=1)
    assert derive_status(obj, [pod("head", ready=False)]).phase == Phase.STARTING


def test_a_head_that_cannot_pull_its_image_is_failed() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "False")))
    status = derive_status(obj, [pod("head", ready=False, waiting="ImagePullBackOff")])
    assert status.phase == Phase.FAILED
    assert status.reason == "head pod c-head-x: ImagePullBackOff: back-off pulling"


def test_a_crashing_worker_degrades_a_running_cluster() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "True")))
    pods = [pod("head"), pod("worker"), pod("worker", ready=False, waiting="CrashLoopBackOff")]
    status = derive_status(obj, pods)
    assert (status.phase, status.workers_ready, status.head_ready) == (Phase.DEGRADED, 1, True)
    assert status.reason.startswith("worker pod c-worker-x: CrashLoopBackOff")


def test_a_crash_loop_says_why_the_container_crashed() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "False")))
    head = pod("head", ready=False, waiting="CrashLoopBackOff")
    # As the kubelet reports it with terminationMessagePolicy FallbackToLogsOnError.
    head["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {"exitCode": 1, "reason": "Error", "message": "starting\nValueError: no\n"}
    }
    status = derive_status(obj, [head])
    assert status.phase == Phase.FAILED
    assert (
        status.reason
        == "head pod c-head-x: CrashLoopBackOff: ray exited with 1 (Error): ValueError: no"
    )


def test_a_restarted_head_says_why_until_it_is_ready_again() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "False")))
    head = pod("head", ready=False)
    head["status"]["containerStatuses"][0].update(
        restartCount=1,
        lastState={"terminated": {"exitCode": 1, "reason": "Error", "message": "gcs died"}},
    )
    status = derive_status(obj, [head])
    assert status.phase == Phase.STARTING
    assert (
        status.reason
        == "head pod c-head-x restarted: ray exited with 1 (Error): gcs died (restart 1)"
    )


def test_head_ready_needs_the_condition_and_a_ready_head_pod() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "True")))
    assert derive_status(obj, [pod("head", ready=False)]).phase == Phase.STARTING
    ready = derive_status(obj, [pod("head"), pod("worker"), pod("worker")])
    assert (ready.phase, ready.workers_ready) == (Phase.READY, 2)


def test_worker_replica_failure_leaves_the_cluster_degraded() -> None:
    failure = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreateWorkerPod",
               "message": "exceeded quota"}  # fmt: skip
    obj = raycluster(**accepted(("HeadPodReady", "True")))
    obj["status"]["conditions"].append(failure)
    status = derive_status(obj, [pod("head"), pod("worker")])
    assert (status.phase, status.reason) == (
        Phase.DEGRADED,
        "FailedCreateWorkerPod: exceeded quota",
    )


def test_suspend_and_resume_transitions() -> None:
    obj = raycluster(**accepted(("RayClusterSuspended", "True")))
    obj["spec"]["suspend"] = True
    assert derive_status(obj).reason == "suspended: no pods running"
    obj["spec"]["suspend"] = False
    assert (derive_status(obj).phase, derive_status(obj).reason) == (Phase.STARTING, "resuming")
    obj = raycluster(**accepted(("HeadPodReady", "True")))
    obj["spec"]["suspend"] = True
    assert derive_status(obj, [pod("head")]).phase == Phase.SUSPENDED


def test_an_old_validation_warning_stops_counting_once_accepted() -> None:
    warning = {"type": "Warning", "reason": "InvalidRayClusterSpec", "message": "bad spec",
               "lastTimestamp": "2026-01-01T00:00:01Z"}  # fmt: skip
    refused = raycluster()
    assert derive_status(refused, [], [warning]).phase == Phase.FAILED
    fixed = raycluster(**accepted())
    assert derive_status(fixed, [], [warning]).phase == Phase.PENDING


def test_an_object_without_raylab_annotations_still_reads() -> None:
    obj = raycluster(**accepted(("HeadPodReady", "True")))
    obj["metadata"]["annotations"] = {}
    info = cluster_info(obj, [pod("head"), pod("worker"), pod("worker")])
    assert (info.spec.gpus, info.spec.workers, info.spec.gpu_type) == (4, 2, "a100")
    assert info.owner == "alice"  # from the label
    assert info.python_version is None


def test_a_cluster_the_operator_leaves_alone_says_so_after_the_grace_period() -> None:
    obj = raycluster()  # no status at all: the operator has not seen it
    assert operator_deadline(obj) == CREATED + OPERATOR_GRACE_S
    early = derive_status(obj, now=CREATED + OPERATOR_GRACE_S - 1)
    assert (early.phase, early.reason) == (
        Phase.PENDING,
        "waiting for the KubeRay operator to create the head",
    )
    late = cluster_info(obj, now=CREATED + OPERATOR_GRACE_S)
    assert (late.phase, late.reason) == (
        Phase.PENDING,
        "the KubeRay operator has not picked this cluster up for 30 s; is it running? "
        "An admin can check the ray-operator deployment",
    )


def test_once_the_operator_has_written_a_status_its_silence_is_not_suspected() -> None:
    obj = raycluster(**accepted())  # accepted, head not made yet (a busy operator)
    assert operator_deadline(obj) is None
    status = derive_status(obj, now=time.time() + 3600)
    assert status.reason == "waiting for the KubeRay operator to create the head"
    # A head pod (the operator made it, its status update is still to come): no hint.
    fresh = raycluster()
    assert derive_status(fresh, [pod("head", ready=False)], now=time.time() + 3600).phase == (
        Phase.STARTING
    )
    gone = raycluster()
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    assert operator_deadline(gone) is None


def test_workers_and_gpus_come_from_the_templates_not_the_annotation() -> None:
    obj = raycluster(workers=2)  # 2 workers of 2 GPUs
    obj["metadata"]["annotations"][SPEC_ANNOTATION] = json.dumps(
        {**json.loads(obj["metadata"]["annotations"][SPEC_ANNOTATION]), "gpus": 0, "workers": 9}
    )
    info = cluster_info(obj)
    assert (info.spec.workers, info.spec.gpus, info.gpus, info.max_gpus) == (2, 4, 4, 4)
    assert info.spec.gpu_type == "a100"  # the rest still from the annotation


def test_every_group_and_the_head_count_at_their_most() -> None:
    obj = raycluster(workers=1)  # one group: 1 replica of 2 GPUs (limits = requests)
    groups = obj["spec"]["workerGroupSpecs"]
    # A second group, added by hand: requests only in one container, a larger limit in
    # another, 2 hosts per replica, autoscaling up to 3 replicas.
    extra = copy.deepcopy(groups[0])
    containers = extra["template"]["spec"]["containers"]
    containers[0]["resources"] = {"requests": {"nvidia.com/gpu": "1"}}
    containers.append(
        {
            "name": "side",
            "resources": {"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": "2"}},
        }
    )
    extra.update(groupName="more", replicas=1, minReplicas=0, maxReplicas=3, numOfHosts=2)
    groups.append(extra)
    obj["spec"]["headGroupSpec"]["template"]["spec"]["initContainers"] = [
        {"name": "warm", "resources": {"limits": {"amd.com/gpu": "1"}}}
    ]
    # Without autoscaling, each group runs its replicas (clamped by KubeRay to min..max).
    info = cluster_info(obj)
    assert (info.spec.workers, info.spec.gpus) == (1 + 2, 2 + 2 * 3)
    assert info.max_gpus == 1 + 2 + 2 * 3  # head (its init container) + the groups
    # With the autoscaler, each group may grow to maxReplicas: at zero replicas too.
    obj["spec"]["enableInTreeAutoscaling"] = True
    for group in groups:
        group["replicas"] = 0
    info = cluster_info(obj)
    assert (info.spec.workers, info.spec.gpus, info.gpus) == (0, 0, 0)
    assert (info.spec.min_workers, info.spec.max_workers) == (1, 1 + 3 * 2)
    assert info.max_gpus == info.quota_gpus == 1 + 2 * 1 + 3 * 2 * 3
