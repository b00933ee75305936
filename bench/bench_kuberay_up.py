"""`%raycluster up` on KubeRay against doing it by hand, with pods that really run Ray.

On the test control plane's process nodes (tests/kubernetes/harness/processnodes.py:
real KubeRay operator, real `ray start` in every pod, this machine's Ray), from a
process outside Kubernetes, alternating in the same run:

- raylab: a fresh Python process runs `raylab up --gpus 2 --workers 2` through
  raylab's command layer (as the magic does) and is done when its kernel is connected
  through raylab's port-forward and every worker is Ready;
- by hand, what a user does without raylab: `kubectl apply -f raycluster.yaml` (the
  very manifest raylab would write, so both start the same pods), `kubectl wait
  --for=condition=RayClusterProvisioned`, `kubectl port-forward svc/NAME-head-svc`,
  then `ray.init("ray://127.0.0.1:PORT")` in a fresh Python process.

Both clocks run from starting that process to its printing CONNECTED. Target ≤ 1.10×.

Second figure: from a head pod really becoming Ready (procnode, the kubelet, logs the
instant its readiness probe first passes) to raylab's watch reporting the head ready
(through the API server and the operator's HeadPodReady, as users see it). p95 over
every head of the run. Target ≤ 0.5 s.

Third: the same `up` without a name, claiming a standby of its shape made before the
clock starts (target ≤ 5 s). Alternating: a standby that has waited 10 s after Ready
(as one made when the user's server started has by the time they run `up`; what its
pods hold meanwhile is measured, as bench_first_task does for the local one), and one
claimed the moment it is Ready, its pods' processes still starting beside the claim.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from report import Figure, emit, median, p95, reported

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

RATIO_TARGET = 1.10
LATENCY_TARGET = 0.5
ROUNDS = int(os.environ.get("BENCH_KUBERAY_ROUNDS", "3"))
GPU_TYPE = "proc"

# The magic's path (connecting), with the CLI's plain-text output.
RAYLAB_UP = """\
import sys
from raylab.cli import TerminalOutput
from raylab.commands import Commands
Commands(TerminalOutput(), prog="bench", may_connect=True).run(
    ["up", "--name", sys.argv[1], "--backend", "kuberay", "--gpus", "2", "--workers", "2",
     "--gpu-type", "proc"])
print("CONNECTED", flush=True)
sys.stdin.read()
"""

# The same `up` without a name: it claims the standby of its shape made before the clock.
RAYLAB_CLAIM = RAYLAB_UP.replace('"--name", sys.argv[1], ', "")

BY_HAND = """\
import subprocess, sys, time
name, manifest, kubectl = sys.argv[1], sys.argv[2], sys.argv[3:]
subprocess.run([*kubectl, "apply", "-f", manifest], check=True, capture_output=True)
subprocess.run([*kubectl, "wait", f"raycluster/{name}", "--for=condition=RayClusterProvisioned",
                "--timeout=600s"], check=True, capture_output=True)
forward = subprocess.Popen([*kubectl, "port-forward", f"svc/{name}-head-svc", ":10001"],
                           stdout=subprocess.PIPE, text=True)
line = forward.stdout.readline()  # Forwarding from 127.0.0.1:PORT -> 10001
port = line.split("127.0.0.1:")[1].split()[0]
import ray
ray.init(f"ray://127.0.0.1:{port}", logging_level="WARNING")
print("CONNECTED", flush=True)
sys.stdin.read()
ray.shutdown()
forward.terminate()
"""


def _connected_after(
    argv: list[str], env: dict[str, str], timeout: float = 900
) -> tuple[float, subprocess.Popen[str]]:
    """Seconds from starting `argv` to its CONNECTED line; the process is left waiting."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        if line.startswith("CONNECTED"):
            return time.perf_counter() - start, proc
        if time.monotonic() > deadline:
            break
    proc.kill()
    raise RuntimeError(f"did not connect: {proc.stderr.read() if proc.stderr else ''}")


def _finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


class HeadWatch:
    """raylab's own watch: when it first reports each cluster's head ready."""

    def __init__(self, backend: Any) -> None:
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(backend,), daemon=True)
        self.thread.start()

    def _run(self, backend: Any) -> None:
        for event in backend.watch(self.stop):
            if event.cluster.head_ready and event.cluster.name not in self.seen:
                self.seen[event.cluster.name] = time.time()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(5)


def _ready_moments(procnode_log: Path, namespace: str) -> dict[str, float]:
    """pod -> when procnode first saw its ray-head container Ready (epoch seconds)."""
    found: dict[str, float] = {}
    pattern = re.compile(rf"{re.escape(namespace)}/(\S+)/ray-head: ready=true at ([0-9.]+)")
    for match in pattern.finditer(procnode_log.read_text(errors="replace")):
        found.setdefault(match.group(1), float(match.group(2)))
    return found


def _wait_gone(core: Any, namespace: str, name: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        pods = core.list_namespaced_pod(namespace, label_selector=f"ray.io/cluster={name}")
        if not pods.items:
            return
        time.sleep(0.5)


def bench_namespace(plane: Any, work: Path) -> tuple[Any, Any, str]:
    """A fresh namespace, ready for pods, and an admin kubeconfig pointing at it
    (work/kubeconfig): (admin API client, CoreV1Api, namespace)."""
    from controlplane import call_json
    from kubernetes import client

    admin = plane.api_client("admin")
    core = client.CoreV1Api(admin)
    namespace = f"bench-{uuid.uuid4().hex[:6]}"
    call_json(core.create_namespace, {"metadata": {"name": namespace}})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # pods are refused until this account exists
        try:
            core.read_namespaced_service_account("default", namespace)
            break
        except client.ApiException:
            time.sleep(0.25)
    kubeconfig = yaml.safe_load(plane.kubeconfig("admin").read_text())
    kubeconfig["contexts"][0]["context"]["namespace"] = namespace
    (work / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    return admin, core, namespace


@dataclass
class Runs:
    ours: list[float]
    hand: list[float]
    latencies: list[float]
    claimed: list[float]  # from a standby that waited
    at_once: list[float]  # from a standby the moment it was Ready
    costs: list[dict[str, float]]  # what each waiting standby held


def measure(plane: Any, work: Path) -> Runs:
    from processnodes import PROCESS_GPU_TYPE, process_profile

    from raylab.backends.kuberay.backend import KubeRayBackend
    from raylab.backends.kuberay.manifest import raycluster_manifest
    from raylab.config import Settings
    from raylab.spec import ClusterSpec

    admin, core, namespace = bench_namespace(plane, work)
    config_dir = work / "jupyter"
    config_dir.mkdir(exist_ok=True)
    (config_dir / "jupyter_server_config.py").write_text(
        f"c.Raylab.gpu_types = {{{PROCESS_GPU_TYPE!r}: {process_profile()!r}}}\n"
        "c.Raylab.max_gpus_per_user = 64\nc.Raylab.wait_timeout = 600.0\n"
    )
    env = dict(os.environ, KUBECONFIG=str(work / "kubeconfig"), JUPYTERHUB_USER="bench",
               JUPYTER_CONFIG_DIR=str(config_dir))  # fmt: skip
    env.pop("KUBERNETES_SERVICE_HOST", None)
    settings = Settings.from_config(gpu_types={PROCESS_GPU_TYPE: process_profile()})
    backend = KubeRayBackend(settings, api_client=admin, namespace=namespace)
    kubectl = ["kubectl", f"--kubeconfig={work / 'kubeconfig'}"]
    watch = HeadWatch(backend)
    ours: list[float] = []
    hand: list[float] = []
    claimed: list[float] = []
    at_once: list[float] = []
    costs: list[dict[str, float]] = []
    try:
        for i in range(ROUNDS):
            name = f"up-{i}"
            took, proc = _connected_after([sys.executable, "-c", RAYLAB_UP, name], env)
            ours.append(took)
            _finish(proc)
            backend.delete(name)
            _wait_gone(core, namespace, name)

            name = f"hand-{i}"
            spec = ClusterSpec.from_mapping(
                {"name": name, "gpus": 2, "workers": 2, "gpu_type": GPU_TYPE}, settings.profiles
            )
            image, ray_version, python_version = backend.image_for(spec)
            manifest = raycluster_manifest(
                spec, settings.profiles.gpu_types[GPU_TYPE], owner="bench",
                namespace=namespace, image=image, ray_version=ray_version,
                python_version=python_version,
            )  # fmt: skip
            path = work / f"{name}.yaml"
            path.write_text(yaml.safe_dump(manifest))
            took, proc = _connected_after([sys.executable, "-c", BY_HAND, name, str(path),
                                           *kubectl], env)  # fmt: skip
            hand.append(took)
            _finish(proc)
            backend.delete(name)
            _wait_gone(core, namespace, name)
        # Alternating: a standby claimed the moment it is Ready, and one that has waited.
        for i in range(ROUNDS):
            took, _ = _claimed_up(backend, settings, env, core, namespace, 2 * i, settle=False)
            at_once.append(took)
            took, cost = _claimed_up(backend, settings, env, core, namespace, 2 * i + 1,
                                     settle=True)  # fmt: skip
            claimed.append(took)
            costs.append(cost)
    finally:
        watch.close()
    moments = _ready_moments(plane.log_dir / "procnode.log", namespace)
    latencies = []
    for pod, at in moments.items():
        cluster = pod.split("-head-")[0]
        if cluster in watch.seen:
            latencies.append(watch.seen[cluster] - at)
    return Runs(ours, hand, latencies, claimed, at_once, costs)


def ready_standby(service: Any, spec: Any) -> Any:
    """A standby of `spec` for the service's user, once Ready (its ClusterInfo)."""
    standby = service.create_standby(spec, time.time() + 900)
    assert standby is not None, "no room in the quota for a standby"
    deadline = time.monotonic() + 600
    while (info := service.backend.get(standby.name)) is None or info.phase != "Ready":
        assert time.monotonic() < deadline, f"standby not Ready: {info}"
        time.sleep(0.5)
    return standby


def _claimed_up(
    backend: Any, settings: Any, env: dict[str, str], core: Any, namespace: str, i: int,
    settle: bool,
) -> tuple[float, dict[str, float]]:  # fmt: skip
    """A standby of the `up`'s shape, Ready before the clock starts, then that `up`.

    `settle`: the standby first waits as a standby does (made when the user's server
    starts, claimed when they run `up`), and what its pods hold meanwhile is measured
    (resident memory of all their processes, CPU over 5 s), as the local bench does;
    else the `up` comes the moment it is Ready, its processes still starting."""
    from raylab.service import ClusterService
    from raylab.spec import ClusterSpec

    spec = ClusterSpec.from_mapping(
        {"name": f"standby-{i}", "gpus": 2, "workers": 2, "gpu_type": GPU_TYPE}, settings.profiles
    )
    standby = ready_standby(ClusterService(backend, settings, "bench"), spec)
    cost = _waiting_cost(standby.name) if settle else {}
    took, proc = _connected_after([sys.executable, "-c", RAYLAB_CLAIM], env)
    _finish(proc)
    after = backend.get(standby.name)
    assert after is not None, "the claimed cluster is gone"
    assert after.standby_until is None, "the up did not claim it"
    backend.delete(standby.name)
    _wait_gone(core, namespace, standby.name)
    return took, cost


def _waiting_cost(name: str) -> dict[str, float]:
    """A waiting standby's pods (every process KubeRay's RAY_CLUSTER_NAME marks as its, and
    their children): resident memory, and CPU over 5 s, after 5 s to settle."""
    from processes import marked, waiting_cost

    time.sleep(5)
    return waiting_cost(marked("RAY_CLUSTER_NAME", name))


def run() -> list[Figure]:
    import tempfile

    from controlplane import Binaries, ControlPlane, ensure_built

    binaries = Binaries.locate()
    if binaries.missing():
        if not os.environ.get("RAYLAB_BENCH_BUILD"):
            print("kuberay up: skipped, the Kubernetes binaries are not built "
                  "(tests/kubernetes/harness/build.sh, or RAYLAB_BENCH_BUILD=1)")  # fmt: skip
            return []
        binaries = ensure_built()
    with ControlPlane(binaries=binaries) as plane, tempfile.TemporaryDirectory() as tmp:
        if plane.process_nodes_unavailable:
            print(f"kuberay up: skipped, no process nodes: {plane.process_nodes_unavailable}")
            return []
        runs = measure(plane, Path(tmp))
    ours, hand, latencies, claimed = runs.ours, runs.hand, runs.latencies, runs.claimed
    rss = [c["rss_mib"] for c in runs.costs]
    pss = [c["pss_mib"] for c in runs.costs]
    cpu = [c["cpu_pct"] for c in runs.costs]
    return [
        Figure(
            name="KubeRay up -> connected kernel, median (process pods, 2 GPU workers)",
            value=median(ours),
            unit="s",
            target=f"≤ {RATIO_TARGET}× by hand",
            anchor=median(hand),
            anchor_name="kubectl apply + wait + port-forward + ray.init",
            samples=ours,
            anchor_samples=hand,
            met=median(ours) <= RATIO_TARGET * median(hand),
        ),
        Figure(
            name="KubeRay up -> connected kernel from a waiting standby, median (the same shape)",
            value=median(claimed),
            unit="s",
            target="≤ 5 s",
            anchor=median(hand),
            anchor_name="kubectl apply + wait + port-forward + ray.init",
            samples=claimed,
            anchor_samples=hand,
            met=median(claimed) <= 5.0,
        ),
        reported("the same, from a standby the moment it is Ready, median", runs.at_once, "s"),
        reported(
            "a waiting standby's pods (head + 2 workers): resident memory (median)", rss, "MiB"
        ),
        reported("a waiting standby's pods: their share of memory, PSS (median)", pss, "MiB"),
        reported("a waiting standby's pods: CPU over 5 s (median)", cpu, "% of a core"),
        Figure(
            name="head pod Ready -> raylab event, p95",
            value=p95(latencies),
            unit="s",
            target=f"≤ {LATENCY_TARGET} s",
            samples=latencies,
            met=p95(latencies) <= LATENCY_TARGET,
        ),
    ]


if __name__ == "__main__":
    emit("raylab: KubeRay up with pods that run Ray", run(), "kuberay_up")
    print(json.dumps({"rounds": ROUNDS}))
