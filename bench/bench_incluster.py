"""The kernel's connection from inside Kubernetes (a notebook pod, as on JupyterHub)
against a driver set up by hand in the same kind of pod, on KubeRay pods that run Ray.

On the test control plane's process nodes: one cluster (2 GPU workers), then pods on a
process node, each a fresh Python as a notebook kernel is, alternating:
- raylab: `%raycluster connect` in the pod (its own service account, in-cluster config):
  the kernel joins the cluster as a node that offers nothing and drives it directly;
- by hand: the same, typed by a user who knows how: `ray start --address=HEAD-SVC:6379
  --num-cpus=0 --num-gpus=0 --block` in the pod, then `ray.init("HEAD-SVC:6379")`;
- Ray Client from the pod (`ray.init("ray://HEAD-SVC:10001")`), what raylab used before.
The workload is bench_driver's: task and actor round trips, 2,000 tasks, put/get of
100 MB. Target: each ≤ 1.2× by hand. Each pod's node leaves before its pod ends, as a
notebook's kernel's does (its pod outlives it): a node killed with its pod stays in
Ray's node list until the GCS misses its heartbeats (~30 s), and an actor the next
driver creates meanwhile may be sent there and die with it.

Then, the first cell of a notebook on JupyterHub, once the first cluster is down: a
standby of the `up`'s shape is made for the pod's user and waits 10 s after Ready (as
one made when their server started has by the time they type), then a pod runs
`%load_ext raylab` and `%raycluster up --gpus 2 --workers 2`, which claims it and joins
it as a node. Its clock starts in the pod's Python, before raylab is imported, and stops
when `up` returns connected. Target (the first-task issue's, KubeRay from a standby):
≤ 5 s.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench_driver import WORKLOAD, driver_figures
from report import Figure, emit, median, reported

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

NAME = "incluster"
# The pod's own node, as a user would start it by hand, then the workload as a driver.
BY_HAND = r"""
import subprocess, sys, time
from raylab.kernel.joined_node import object_store_bytes
gcs = sys.argv[1]
log = open("/tmp/ray-start.log", "w")
# The object store raylab's kernel would take in this pod: only who set it up differs.
store = str(object_store_bytes())
node = subprocess.Popen(["ray", "start", "--address=" + gcs, "--num-cpus=0", "--num-gpus=0",
                         "--object-store-memory=" + store, "--disable-usage-stats", "--block"],
                        stdout=log, stderr=log)
deadline = time.time() + 180
while "Ray runtime started" not in open("/tmp/ray-start.log").read():
    assert time.time() < deadline, open("/tmp/ray-start.log").read()
    time.sleep(0.2)
subprocess.run([sys.executable, "-c", sys.argv[2], "driver", gcs])
node.terminate()  # the node leaves the cluster (Ray drains it on SIGTERM)
node.wait(60)
"""

# A notebook's first cell in the pod: `up` claims the standby made for its user (the pod
# has no notebook folder, its working directory is /: nothing to ship, as for the others).
CLAIM = r"""
import json, time
t0 = time.perf_counter()
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
loaded = time.perf_counter()
ip.run_line_magic("raycluster", "up --gpus 2 --workers 2 --no-sync")
up = time.perf_counter()
from raylab.kernel.connect import connected_cluster
print("CONNECTED", connected_cluster(), flush=True)
print("RESULT " + json.dumps({"up": up - t0, "load_ext": loaded - t0}), flush=True)
ip.run_line_magic("raycluster", "disconnect")
"""
# How long a standby waits after Ready before its claim.
SETTLE_S = 10.0


def _pod(name: str, argv: list[str], token_secret: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "notebook",
            "restartPolicy": "Never",
            "nodeSelector": {"raylab.io/process-node": "true"},
            "tolerations": [{"key": "raylab.io/process-node", "operator": "Exists"}],
            "containers": [{
                "name": "notebook", "image": "jupyter/singleuser:not-pulled",
                "command": ["python", "-c", *argv],
                "env": [
                    {"name": "JUPYTERHUB_USER", "value": "alice"},
                    {"name": "JUPYTER_CONFIG_DIR", "value": "/mnt/jupyter"},
                    # By hand and through Ray Client the user brings the token themselves.
                    *([{"name": "RAY_AUTH_MODE", "value": "token"},
                       {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {
                           "name": token_secret, "key": "auth_token"}}}]
                      if not name.startswith("raylab") else []),
                ],
                "volumeMounts": [{"name": "jupyter", "mountPath": "/mnt/jupyter"},
                                 {"name": "shm", "mountPath": "/dev/shm"}],
            }],
            "volumes": [{"name": "jupyter", "configMap": {"name": "jupyter"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "1Gi"}}],
        },
    }  # fmt: skip


def _result(core: Any, namespace: str, pod: str) -> tuple[dict[str, float], str]:
    """The pod's RESULT line, and its log."""
    from controlplane import call_json, wait_until

    def finished() -> str | None:
        phase = call_json(core.read_namespaced_pod, pod, namespace)["status"].get("phase")
        return str(phase) if phase in ("Succeeded", "Failed") else None

    wait_until(f"pod {pod} to finish", finished, timeout=900, interval=1)
    log = core.read_namespaced_pod_log(pod, namespace, _preload_content=False).data.decode()
    for line in log.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line.removeprefix("RESULT "))), log
    raise RuntimeError(f"{pod}: no result\n{log[-4000:]}")


def setup(plane: Any, work: Path) -> tuple[Any, Any, str, dict[str, str]]:
    """A namespace where alice's notebook pods may run raylab: (admin API client,
    CoreV1Api, namespace, the environment of raylab's CLI run as alice from here)."""
    from bench_kuberay_up import bench_namespace
    from controlplane import call_json
    from kubernetes import client
    from processnodes import PROCESS_GPU_TYPE, process_profile

    from tests.kubernetes.kuberay_support import grant

    admin, core, ns = bench_namespace(plane, work)
    grant(admin, ns, "alice")
    call_json(core.create_namespaced_service_account, ns, {"metadata": {"name": "notebook"}})
    rbac = client.RbacAuthorizationV1Api(admin)
    call_json(rbac.create_namespaced_role_binding, ns, {
        "metadata": {"name": "raylab-notebook"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "raylab-user"},
        "subjects": [{"kind": "ServiceAccount", "name": "notebook", "namespace": ns}],
    })  # fmt: skip
    config = (
        f"c.Raylab.gpu_types = {{{PROCESS_GPU_TYPE!r}: {process_profile()!r}}}\n"
        f"c.Raylab.default_gpu_type = {PROCESS_GPU_TYPE!r}\nc.Raylab.wait_timeout = 600.0\n"
        'c.Raylab.backend = "kuberay"\n'  # as a hub's notebook image sets it
    )
    (work / "jupyter").mkdir()
    (work / "jupyter" / "jupyter_server_config.py").write_text(config)
    files = {"jupyter_server_config.py": config}
    call_json(
        core.create_namespaced_config_map, ns, {"metadata": {"name": "jupyter"}, "data": files}
    )
    env = {**os.environ, "KUBECONFIG": str(work / "kubeconfig"), "JUPYTERHUB_USER": "alice",
           "JUPYTER_CONFIG_DIR": str(work / "jupyter")}  # fmt: skip
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return admin, core, ns, env


def _run_pod(core: Any, ns: str, pod: str, argv: list[str]) -> tuple[dict[str, float], str]:
    """Run a pod to its end: its RESULT line and its log."""
    from controlplane import call_json

    call_json(core.create_namespaced_pod, ns, _pod(pod, argv, f"{NAME}-ray-token"))
    try:
        return _result(core, ns, pod)
    finally:
        core.delete_namespaced_pod(pod, ns, grace_period_seconds=0)


def measure(
    core: Any, ns: str, env: dict[str, str], rounds: int
) -> dict[str, list[dict[str, float]]]:
    from processnodes import PROCESS_GPU_TYPE

    up = [sys.executable, "-m", "raylab.cli", "up", "--name", NAME, "--backend", "kuberay",
          "--gpus", "2", "--workers", "2", "--cpus", "1",
          "--gpu-type", PROCESS_GPU_TYPE]  # fmt: skip
    done = subprocess.run(up, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(done.stdout + done.stderr)
    svc = f"{NAME}-head-svc.{ns}.svc"
    modes = {
        # The pod has no notebook folder (its working directory is /): nothing to ship,
        # as by hand.
        "raylab": [WORKLOAD, "raylab", f"{NAME} --backend kuberay --no-sync"],
        "driver": [BY_HAND, f"{svc}:6379", WORKLOAD],
        "client": [WORKLOAD, "client", f"ray://{svc}:10001"],
    }
    samples: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    # First an unmeasured one: the first driver on a fresh cluster faults in the object
    # stores' pages and starts the first workers, which whichever side went first paid.
    order = ["warm"] + [m for i in range(rounds) for m in (("raylab", "driver") if i % 2 == 0
                        else ("driver", "raylab"))] + ["client"]  # fmt: skip
    try:
        for i, mode in enumerate(order):
            found, _ = _run_pod(
                core, ns, f"{mode}-{i}", modes["driver" if mode == "warm" else mode]
            )
            if mode != "warm":
                samples[mode].append(found)
    finally:
        subprocess.run([sys.executable, "-m", "raylab.cli", "down", NAME, "--backend", "kuberay"],
                       env=env, capture_output=True, timeout=300)  # fmt: skip
    return samples


def measure_claims(admin: Any, core: Any, ns: str, rounds: int) -> list[dict[str, float]]:
    """Each round: a standby for alice, Ready and waited on, claimed by a pod's `up`."""
    from bench_kuberay_up import _wait_gone, ready_standby
    from processnodes import PROCESS_GPU_TYPE, process_profile

    from raylab.backends.kuberay.backend import KubeRayBackend
    from raylab.config import Settings
    from raylab.service import ClusterService
    from raylab.spec import ClusterSpec

    settings = Settings.from_config(
        gpu_types={PROCESS_GPU_TYPE: process_profile()}, default_gpu_type=PROCESS_GPU_TYPE
    )
    backend = KubeRayBackend(settings, api_client=admin, namespace=ns)
    spec = ClusterSpec.from_mapping({"gpus": 2, "workers": 2}, settings.profiles)
    found = []
    for i in range(rounds):
        standby = ready_standby(ClusterService(backend, settings, "alice"), spec)
        time.sleep(SETTLE_S)
        try:
            result, log = _run_pod(core, ns, f"raylab-claim-{i}", [CLAIM])
            after = backend.get(standby.name)
            assert after is not None, f"the claimed cluster is gone:\n{log[-3000:]}"
            assert after.standby_until is None, f"the pod did not claim it:\n{log[-3000:]}"
            found.append(result)
        finally:
            backend.delete(standby.name)
            _wait_gone(core, ns, standby.name)
    return found


def run(rounds: int = 1) -> list[Figure]:
    from controlplane import Binaries, ControlPlane

    binaries = Binaries.locate()
    if binaries.missing():
        print("in-cluster driver: skipped, the Kubernetes binaries are not built "
              "(tests/kubernetes/harness/build.sh)")  # fmt: skip
        return []
    with ControlPlane(binaries=binaries) as plane, tempfile.TemporaryDirectory() as tmp:
        if plane.process_nodes_unavailable:
            print(
                f"in-cluster driver: skipped, no process nodes: {plane.process_nodes_unavailable}"
            )
            return []
        admin, core, ns, env = setup(plane, Path(tmp))
        samples = measure(core, ns, env, rounds)
        claims = measure_claims(admin, core, ns, rounds)
    ups = [c["up"] for c in claims]
    return [
        *driver_figures(samples, "in a pod: ", "ray start --address + ray.init in the pod by hand"),
        Figure(
            name="in a pod: %raycluster up from a waiting standby → connected (median)",
            value=median(ups),
            unit="s",
            target="≤ 5 s",
            samples=ups,
            met=median(ups) <= 5.0,
        ),
        reported("in a pod: of that, %load_ext raylab", [c["load_ext"] for c in claims], "s"),
    ]


if __name__ == "__main__":
    emit("the kernel in a pod against a driver by hand there",
         run(int(os.environ.get("ROUNDS", "1"))), "incluster")  # fmt: skip
