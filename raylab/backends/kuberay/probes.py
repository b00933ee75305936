"""Readiness and liveness probes for the Ray containers. Pure: no I/O.

KubeRay v1.5.0 gives a Ray container its own probes only where the template has none
(`common/pod.go`, `initLivenessAndReadinessProbe`): the same checks as below, but its
readiness starts after 10 s and runs every 5 s, so a head is seen Ready 10 s or more
after Ray is up. raylab sets both probes itself, with KubeRay's commands (so a pod is
Ready exactly when KubeRay would call it Ready), and a readiness probe that starts at
once and runs every second.

- Head: the raylet, through the dashboard agent, and the GCS, through the dashboard.
  A Ready head therefore also serves the dashboard, which raylab reads (Jobs API).
- Worker: its raylet, through its dashboard agent.

Both endpoints answer without Ray's auth token (Ray lists them as public paths), so
the probes work on clusters that run with RAY_AUTH_MODE=token. `wget` is in the
rayproject images, which KubeRay's own probes rely on too. Exec, not httpGet: one probe
must ask two endpoints on the head, and a kubelet's httpGet asks the pod's IP, not
localhost; the price is a bash and a wget or two each second per Ray container.
"""

from __future__ import annotations

from typing import Any

# KubeRay passes `--dashboard-agent-listen-port=52365` unless told otherwise, and its
# probes ask this port.
DASHBOARD_AGENT_PORT = 52365
RAYLET_HEALTH_PATH = "api/local_raylet_healthz"  # on the agent: is the local raylet up
GCS_HEALTH_PATH = "api/gcs_healthz"  # on the head's dashboard: does the GCS answer

# Readiness: on the start path, so asked at once and every second.
READINESS_INITIAL_DELAY_S = 0  # the first try costs a refused connection, nothing more
READINESS_PERIOD_S = 1  # Ready is seen within a second of Ray being up
# Each health endpoint answers in milliseconds on localhost; one second is generous,
# and a slow answer is only one failure among many allowed.
READINESS_WGET_TIMEOUT_S = 1
# 50 failures in a row at 1 s: a slow-but-alive pod stays Ready as long as under
# KubeRay's 10 failures at 5 s (50 s).
READINESS_FAILURE_THRESHOLD = 50

# Liveness: never on the start path, and it restarts Ray, so KubeRay's generous values:
# a busy but healthy container must never be killed.
LIVENESS_INITIAL_DELAY_S = 30
LIVENESS_PERIOD_S = 5
LIVENESS_WGET_TIMEOUT_S = 2  # KubeRay's, per endpoint
LIVENESS_FAILURE_THRESHOLD = 120  # 10 minutes of failures in a row before a restart


def _wget(port: int, path: str, timeout_s: int) -> str:
    """KubeRay's check (`utils.BaseWgetHealthCommand`): one try, and the body says success."""
    return f"wget --tries 1 -T {timeout_s} -q -O- http://localhost:{port}/{path} | grep success"


def _command(dashboard_port: int | None, wget_timeout_s: int) -> list[str]:
    checks = [_wget(DASHBOARD_AGENT_PORT, RAYLET_HEALTH_PATH, wget_timeout_s)]
    if dashboard_port is not None:
        checks.append(_wget(dashboard_port, GCS_HEALTH_PATH, wget_timeout_s))
    return ["bash", "-c", " && ".join(checks)]


def ray_probes(*, dashboard_port: int | None) -> dict[str, dict[str, Any]]:
    """The `readinessProbe` and `livenessProbe` of a Ray container: the head's, given
    its dashboard's port, or a worker's (None)."""
    head = dashboard_port is not None
    checks = 2 if head else 1  # the probe's timeout covers every wget, one after another
    return {
        "readinessProbe": {
            "exec": {"command": _command(dashboard_port, READINESS_WGET_TIMEOUT_S)},
            "initialDelaySeconds": READINESS_INITIAL_DELAY_S,
            "periodSeconds": READINESS_PERIOD_S,
            "timeoutSeconds": checks * READINESS_WGET_TIMEOUT_S,
            "successThreshold": 1,
            "failureThreshold": READINESS_FAILURE_THRESHOLD,
        },
        "livenessProbe": {
            "exec": {"command": _command(dashboard_port, LIVENESS_WGET_TIMEOUT_S)},
            "initialDelaySeconds": LIVENESS_INITIAL_DELAY_S,
            "periodSeconds": LIVENESS_PERIOD_S,
            # KubeRay's: 5 s on the head (two endpoints), 2 s on a worker.
            "timeoutSeconds": 5 if head else LIVENESS_WGET_TIMEOUT_S,
            "successThreshold": 1,
            "failureThreshold": LIVENESS_FAILURE_THRESHOLD,
        },
    }
