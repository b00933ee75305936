"""One culler sweep over 1,000 clusters on the real control plane, with the real operator.

1,000 RayClusters as raylab writes them (BENCH_CULLER_CLUSTERS), of which 100 run
(BENCH_CULLER_RUNNING: lone 100m heads that KWOK makes Ready) and the rest are suspended.
KWOK pods run no Ray, so every running cluster's activity is read from one real, idle
local Ray head (token auth off) through `c.Raylab.culler_dashboard_url`: real HTTP to a
real dashboard, once per cluster. The culler follows the clusters with its own watch
(a separate API client, not counted); every other Kubernetes request it makes goes
through a counted client. The culler's clock is injected, so the sweeps that warn and
suspend come without waiting an hour.

Sweeps measured, in order: the first (reads each token once, stores "idle since"), a
steady one (target: no Kubernetes request; dashboard requests: at most three per running
GPU cluster while idle (GPU use, running tasks, running jobs), one when a GPU is busy:
raylab/culler/activity.py), the warning sweep and the suspending sweep
(target: Kubernetes requests = the writes themselves).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from report import Figure, emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

CLUSTERS = int(os.environ.get("BENCH_CULLER_CLUSTERS", "1000"))
RUNNING = int(os.environ.get("BENCH_CULLER_RUNNING", "100"))


class Counted:
    """Counts the HTTP requests an ApiClient makes."""

    def __init__(self, api: Any) -> None:
        self.count = 0
        request = api.rest_client.request

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return request(*args, **kwargs)

        api.rest_client.request = counting


def _create(admin: Any, namespace: str) -> list[str]:
    from kubernetes import client

    from raylab.backends.kuberay.manifest import raycluster_manifest
    from raylab.profiles import Profiles
    from raylab.spec import ClusterSpec

    profiles = Profiles()
    custom = client.CustomObjectsApi(admin)
    every = max(1, CLUSTERS // max(1, RUNNING))
    bodies, running = [], []
    for i in range(CLUSTERS):
        name = f"cull-{i:04d}"
        spec = ClusterSpec.from_mapping(
            {"name": name, "workers": 0, "cpus": "100m", "memory": "128Mi"}, profiles
        )
        body = raycluster_manifest(
            spec, profiles.gpu_types[spec.gpu_type], owner="alice", namespace=namespace,
            image="rayproject/ray:2.60.0-py311", ray_version="2.60.0",
        )  # fmt: skip
        if i % every == 0 and len(running) < RUNNING:
            running.append(name)
        else:
            body["spec"]["suspend"] = True
        bodies.append(body)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda b: custom.create_namespaced_custom_object(
            "ray.io", "v1", namespace, "rayclusters", b), bodies))  # fmt: skip
    return running


def run() -> list[Figure]:
    from controlplane import ControlPlane, ensure_built, wait_until

    from raylab.backends.kuberay.backend import KubeRayBackend
    from raylab.backends.local.backend import LocalBackend
    from raylab.config import Settings
    from raylab.culler.mirror import ClusterMirror
    from raylab.culler.sweep import Culler, SweepReport
    from raylab.model import Phase
    from raylab.service import ClusterService
    from tests.kubernetes.kuberay_support import new_namespace

    results: list[tuple[str, SweepReport, int, int]] = []
    with (
        tempfile.TemporaryDirectory(prefix="raylab-bench-culler-") as tmp,
        ControlPlane(binaries=ensure_built()) as plane,
        plane.api_client("admin") as admin,
        new_namespace(admin, "bench-cull") as namespace,
    ):
        os.environ["RAYLAB_STATE_DIR"] = str(Path(tmp) / "state")
        local_settings = Settings.from_config(ray_auth="disabled")
        head = ClusterService(LocalBackend(local_settings.local_state_dir(), token_auth=False),
                              local_settings, "bench")  # fmt: skip
        driver: subprocess.Popen[bytes] | None = None
        try:
            head.create({"name": "bench-ray", "workers": 0, "cpus": "1"})
            ray_info = head.wait("bench-ray", lambda i: i.phase == Phase.READY, timeout=600)
            started = time.monotonic()
            running = _create(admin, namespace)
            print(f"created {CLUSTERS} clusters in {time.monotonic() - started:.0f} s")
            settings = Settings.from_config(
                backend="kuberay",
                idle_suspend_minutes={"cpu": 60},
                culler_dashboard_url=ray_info.endpoints.dashboard or "",
                usage_flush_seconds=10**9,
            )
            watched = KubeRayBackend(settings, api_client=plane.api_client("admin"),
                                     namespace=namespace)  # fmt: skip
            counted_api = plane.api_client("admin")
            counter = Counted(counted_api)
            backend = KubeRayBackend(settings, api_client=counted_api, namespace=namespace)
            mirror = ClusterMirror(watched)
            mirror.start()
            ready = set(running)

            def all_ready() -> bool:
                up = {c.name for c in mirror.clusters() if c.phase == Phase.READY}
                return ready <= up

            wait_until(f"{RUNNING} clusters Ready", all_ready, timeout=600, interval=1)
            clock = [time.time()]
            culler = Culler(backend, settings, clock=lambda: clock[0])

            def sweep(label: str) -> SweepReport:
                k8s, dash = counter.count, culler.reader.requests
                report = culler.sweep(mirror.clusters())
                results.append((label, report, counter.count - k8s, culler.reader.requests - dash))
                print(f"{label}: {report}")
                return report

            def settled(check: Any) -> None:
                wait_until("the watch shows the writes",
                           lambda: all(check(c) for c in mirror.clusters() if c.name in ready),
                           timeout=120, interval=0.2)  # fmt: skip

            sweep("first sweep (tokens read once, idle since stored)")
            settled(lambda c: c.idle.since is not None)
            sweep("steady sweep, idle clusters")
            gcs = (ray_info.endpoints.client or "").rsplit(":", 1)[0].replace("ray://", "")
            port = head.backend._read("bench-ray").ports["gcs"]  # type: ignore[attr-defined]
            driver = subprocess.Popen(
                [sys.executable, "-c",
                 f"import ray, time; ray.init('{gcs}:{port}'); print('up', flush=True); "
                 "time.sleep(3600)"],
                env={**os.environ, "RAY_AUTH_MODE": "disabled"}, stdout=subprocess.PIPE,
            )  # fmt: skip
            assert driver.stdout is not None
            driver.stdout.readline()
            sweep("a driver connects (idle state cleared)")
            settled(lambda c: c.idle.since is None)
            sweep("steady sweep, a driver connected")
            driver.kill()
            driver.wait()
            driver = None
            wait_until(
                "the driver is gone",
                lambda: culler.reader.read(next(c for c in mirror.clusters()
                                                if c.name in ready)).state == "idle",
                timeout=120, interval=1,
            )  # fmt: skip
            sweep("idle again (idle since stored)")
            settled(lambda c: c.idle.since is not None)
            clock[0] += 55 * 60
            sweep("warning sweep (50 min later)")
            settled(lambda c: c.idle.suspend_at is not None)
            clock[0] += 10 * 60 + 1  # + 1 s: the annotation keeps whole seconds
            sweep("suspending sweep (10 min later)")
            mirror.stop()
        finally:
            if driver is not None:
                driver.kill()
            if head.backend.get("bench-ray") is not None:
                head.delete("bench-ray")
    figures = []
    for label, report, k8s, dash in results:
        writes = report.writes
        steady = label.startswith("steady")
        figures.append(Figure(
            name=f"{label}: Kubernetes requests beyond the watch ({RUNNING} running of "
                 f"{CLUSTERS})",
            value=float(k8s), unit="requests",
            target="0" if steady else f"the writes ({writes}) + tokens read once",
            met=(k8s == 0) if steady else None,
        ))  # fmt: skip
        figures.append(Figure(
            name=f"{label}: dashboard requests", value=float(dash), unit="requests",
            target=f"≤ 3 per running GPU cluster ({3 * RUNNING}); 1 when a GPU is busy",
            met=dash <= 3 * report.read,
        ))  # fmt: skip
        figures.append(Figure(
            name=f"{label}: sweep time", value=report.seconds, unit="s", target="reported"
        ))  # fmt: skip
    return figures


if __name__ == "__main__":
    emit("One culler sweep over 1,000 clusters", run(), "culler")
