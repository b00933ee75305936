"""The start-up phase of a cluster, in the words the card and `up`'s lines use."""

from __future__ import annotations

from ..model import ClusterInfo, Phase

QUEUE = "Waiting in the queue"
SCHEDULING = "Scheduling"
PULLING = "Pulling the image"
STARTING_RAY = "Starting Ray"
WORKERS = "Starting workers"
# A backend's reason that begins so names the image pull (KubeRay: a scheduled pod whose
# containers are being created).
PULLING_REASON = "pulling the image"


def startup_phase(info: ClusterInfo) -> str | None:
    """The phase a starting cluster is in; None for one that is not starting."""
    if info.phase == Phase.QUEUED:
        return QUEUE
    if info.phase == Phase.PENDING:
        return SCHEDULING
    if info.phase != Phase.STARTING:
        return None
    if info.head_ready:
        return WORKERS
    if info.reason.startswith(PULLING_REASON):
        return PULLING
    return STARTING_RAY
