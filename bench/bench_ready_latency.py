"""From the operator writing "ready" on a RayCluster to raylab reporting Ready.

Against the real KubeRay operator on the test control plane (tests/kubernetes/harness).
For each of N clusters, three observers run side by side:

- the reference: an admin watch on RayClusters notes when it first sees the object with
  HeadPodReady=True and every desired worker ready (the operator's write, as delivered);
- raylab: `KubeRayBackend.watch()` notes when it yields the cluster as Ready;
- the anchor: a loop that reads the object every 5 s from creation on, as codeflare-sdk's
  `wait_ready()` does, and notes when it sees the same ready state.

Figures: p95 of (raylab - reference) against p95 of (polling - reference). Target ≤ 0.5 s.
Clusters are created one every 1.5 s, so the polling phase differs between them. The same
change reaches both watches on separate connections, so raylab can see it a few
milliseconds before the reference does: samples near zero may be negative.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from report import Figure, emit, median, p95

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

POLL_SECONDS = 5.0  # codeflare-sdk wait_ready's sleep
TARGET = 0.5
RAY = ("ray.io", "v1")


def operator_ready(obj: dict[str, Any]) -> bool:
    status = obj.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    desired = sum(int(g.get("replicas") or 0) for g in obj["spec"].get("workerGroupSpecs") or [])
    return conditions.get("HeadPodReady") == "True" and (
        int(status.get("readyWorkerReplicas") or 0) >= desired
    )


def _reference_watch(
    api: Any, namespace: str, seen: dict[str, float], stop: threading.Event
) -> None:
    from kubernetes import client
    from kubernetes.watch import watch as k8s_watch

    custom = client.CustomObjectsApi(api)
    response = custom.list_namespaced_custom_object(
        *RAY, namespace, "rayclusters", watch=True, _preload_content=False,
        timeout_seconds=600, _request_timeout=(5, 630),
    )  # fmt: skip
    for line in k8s_watch.iter_resp_lines(response):
        now = time.perf_counter()
        if stop.is_set():
            break
        if not line:
            continue
        obj = json.loads(line).get("object") or {}
        name = (obj.get("metadata") or {}).get("name")
        if name and name not in seen and operator_ready(obj):
            seen[name] = now


def _raylab_watch(backend: Any, seen: dict[str, float], stop: threading.Event) -> None:
    from raylab.model import Phase

    for event in backend.watch(stop):
        now = time.perf_counter()
        if event.cluster.phase == Phase.READY and event.cluster.name not in seen:
            seen[event.cluster.name] = now


def _poll(get: Callable[[], dict[str, Any]], name: str, seen: dict[str, float]) -> None:
    """codeflare-sdk's wait_ready: check, then sleep 5 s, until ready."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if operator_ready(get()):
            seen[name] = time.perf_counter()
            return
        time.sleep(POLL_SECONDS)


def _when_seen(names: list[str], tables: list[dict[str, float]], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(n in t for n in names for t in tables):
            return True
        time.sleep(0.05)
    return False


def measure(api: Any, namespace: str, clusters: int) -> tuple[list[float], list[float]]:
    from kubernetes import client

    from raylab.backends.kuberay.backend import KubeRayBackend
    from raylab.config import Settings
    from raylab.spec import ClusterSpec

    settings = Settings.from_config(max_clusters_per_user=clusters)
    backend = KubeRayBackend(settings, api_client=api, namespace=namespace)
    custom = client.CustomObjectsApi(api)
    reference: dict[str, float] = {}
    ours: dict[str, float] = {}
    polled: dict[str, float] = {}
    stop = threading.Event()
    watchers = [
        threading.Thread(target=_reference_watch, args=(api, namespace, reference, stop)),
        threading.Thread(target=_raylab_watch, args=(backend, ours, stop)),
    ]
    for w in watchers:
        w.daemon = True
        w.start()
    time.sleep(1.0)  # both watches established
    pollers = []
    names = [f"lat-{i}" for i in range(clusters)]
    for name in names:
        fields = {"name": name, "gpu_type": "cpu", "workers": 1, "cpus": "1", "memory": "1Gi"}
        backend.create(ClusterSpec.from_mapping(fields, settings.profiles), "bench")

        def get(name: str = name) -> dict[str, Any]:
            response = custom.get_namespaced_custom_object(
                *RAY, namespace, "rayclusters", name, _preload_content=False
            )
            obj: dict[str, Any] = json.loads(response.data)
            return obj

        def observe(name: str = name, get: Callable[[], dict[str, Any]] = get) -> None:
            _poll(get, name, polled)
            # Seen by all three: make room on the fake nodes for the next clusters.
            _when_seen([name], [ours, reference], 30)
            backend.delete(name, propagation="Background")

        poller = threading.Thread(target=observe, daemon=True)
        poller.start()
        pollers.append(poller)
        time.sleep(1.5)
    for poller in pollers:
        poller.join(timeout=180)
    stop.set()
    watchers[1].join(timeout=5)  # raylab's watch closes its connections before the plane stops
    missing = [n for n in names if not (n in ours and n in reference and n in polled)]
    if missing:
        raise RuntimeError(f"no Ready seen for {missing}")
    ours_lat = [ours[n] - reference[n] for n in names]
    poll_lat = [polled[n] - reference[n] for n in names]
    return ours_lat, poll_lat


def run(clusters: int = 20) -> list[Figure]:
    from controlplane import Binaries, ControlPlane, call_json, ensure_built
    from kubernetes import client

    binaries = Binaries.locate()
    if binaries.missing():
        if not os.environ.get("RAYLAB_BENCH_BUILD"):
            print("ready latency: skipped, the Kubernetes binaries are not built "
                  "(tests/kubernetes/harness/build.sh, or RAYLAB_BENCH_BUILD=1)")  # fmt: skip
            return []
        binaries = ensure_built()
    with ControlPlane(binaries=binaries) as plane:
        api = plane.api_client("admin")
        namespace = f"bench-{uuid.uuid4().hex[:6]}"
        core = client.CoreV1Api(api)
        call_json(core.create_namespace, {"metadata": {"name": namespace}})
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # pods are refused until this account exists
            try:
                core.read_namespaced_service_account("default", namespace)
                break
            except client.ApiException:
                time.sleep(0.25)
        ours, polled = measure(api, namespace, clusters)
    value, anchor = p95(ours), p95(polled)
    return [
        Figure(
            name="ready latency p95, operator -> raylab (watch)",
            value=value,
            unit="s",
            target=f"≤ {TARGET} s",
            anchor=anchor,
            anchor_name="5 s polling, as codeflare-sdk wait_ready",
            samples=ours,
            anchor_samples=polled,
            met=value <= TARGET,
        ),
        Figure(
            name="ready latency median, operator -> raylab (watch)",
            value=median(ours),
            unit="s",
            target="—",
            anchor=median(polled),
            anchor_name="5 s polling, as codeflare-sdk wait_ready",
        ),
    ]


if __name__ == "__main__":
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    emit("raylab: time to Ready after the operator", run(count), "ready_latency")
