"""KubeRay clusters that really run Ray, through raylab's own doors, end to end.

The pods run on the process nodes (harness/processnodes.py): real KubeRay operator, real
`ray start` in each pod (this machine's Ray: images are not pulled), each pod with its
own IP. A real kernel (nbclient) outside Kubernetes, as alice with the documented Role,
brings one cluster up and the tests use it in file order, as a user's session would:
connect through raylab's port-forward, GPU tasks on the worker pods, the head's log,
the dashboard through the Jupyter server's proxy (a page, the Jobs API, a websocket),
scale and suspend/resume followed by Ray's own node count. A second, broken cluster
shows a failing command's real error. GPUs are logical (no device here): Ray counts
what rayStartParams declare, as on the local backend.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from controlplane import ControlPlane, call_json, wait_until
from jupyter_core.utils import run_sync
from kubernetes import client as k8s_client
from kubernetes.stream import stream
from nbclient import NotebookClient
from nbformat import NotebookNode
from processnodes import PROCESS_GPU_TYPE, process_profile
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from .kuberay_support import RAY, grant, new_namespace, ray_pods, user_kubeconfig
from .server_process import Server

NAME = "e2e"
BROKEN = "e2e-broken"
AUTO = "e2e-auto"
K = "--backend kuberay"

# Polls Ray itself (not Kubernetes) until the cluster has `nodes` live nodes and `gpus`
# GPUs; prints what it saw either way.
RAY_NODES = """\
import json, time, ray
def ray_nodes(nodes, gpus, timeout=240):
    deadline = time.time() + timeout
    while True:
        alive = [n for n in ray.nodes() if n["Alive"]]
        seen = {"nodes": len(alive), "gpus": ray.cluster_resources().get("GPU", 0)}
        if (seen["nodes"], seen["gpus"]) == (nodes, gpus) or time.time() > deadline:
            return json.dumps(seen)
        time.sleep(1)
"""


@dataclass
class Session:
    client: NotebookClient
    namespace: str
    kubeconfig: Path
    folder: Path
    admin: k8s_client.ApiClient

    def cell(self, source: str) -> str:
        """Run a cell in the kernel and return what it printed (an error fails the test)."""
        cell = nbformat.v4.new_code_cell(source)
        self.client.nb.cells.append(cell)
        done: NotebookNode = self.client.execute_cell(cell, len(self.client.nb.cells) - 1)
        return text_of(done)

    def value(self, source: str) -> Any:
        """The JSON a cell prints on its last line (Ray's own messages may come first)."""
        out = self.cell(source)
        for line in reversed(out.splitlines()):
            with contextlib.suppress(ValueError):
                return json.loads(line)
        raise AssertionError(f"no JSON printed by:\n{source}\n---\n{out}")

    def magic(self, line: str) -> str:
        return self.cell(f"%raycluster {line} {K}")

    def fails(self, line: str) -> str:
        """A magic that must fail: the error it shows (a UsageError, no traceback)."""
        source = (
            "from IPython.core.error import UsageError\n"
            "try:\n"
            f"    get_ipython().run_line_magic('raycluster', {line + ' ' + K!r})\n"
            "except UsageError as err:\n"
            "    print('USAGE ERROR:', err)\n"
        )
        out = self.cell(source)
        assert "USAGE ERROR:" in out, out
        return out.split("USAGE ERROR:", 1)[1].strip()

    def pods(self, cluster: str = NAME) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {"head": [], "worker": []}
        for pod in ray_pods(self.admin, self.namespace, cluster):
            out[pod["metadata"]["labels"]["ray.io/node-type"]].append(pod)
        return out


def text_of(cell: NotebookNode) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def write_config(config_dir: Path) -> None:
    """What an admin puts in jupyter_server_config.py: the process nodes' GPU type."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "jupyter_server_config.py").write_text(
        f"c.Raylab.gpu_types = {{{PROCESS_GPU_TYPE!r}: {process_profile()!r}}}\n"
        f"c.Raylab.default_gpu_type = {PROCESS_GPU_TYPE!r}\n"
        "c.Raylab.max_gpus_per_user = 16\n"
        "c.Raylab.wait_timeout = 300.0\n"
    )


@pytest.fixture(scope="module")
def session(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    process_nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Session]:
    folder = tmp_path_factory.mktemp("kuberay-e2e")
    write_config(folder / "jupyter")
    with new_namespace(admin_api, "e2e") as namespace, pytest.MonkeyPatch.context() as env:
        grant(admin_api, namespace, "alice")
        kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace, folder / "kc")
        # The kernel's environment: a laptop's (no KUBERNETES_SERVICE_HOST), as alice.
        env.setenv("KUBECONFIG", str(kubeconfig))
        env.setenv("JUPYTERHUB_USER", "alice")
        env.setenv("JUPYTER_CONFIG_DIR", str(folder / "jupyter"))
        env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        client = NotebookClient(nbformat.v4.new_notebook(), timeout=600, kernel_name="python3")
        with client.setup_kernel():
            s = Session(client, namespace, kubeconfig, folder, admin_api)
            s.cell("%load_ext raylab")
            s.cell(RAY_NODES)
            try:
                yield s
            finally:
                for name in (NAME, AUTO, BROKEN):
                    with contextlib.suppress(Exception):
                        s.cell(f"%raycluster down {name} {K}")
                if client.km is not None:
                    run_sync(client.km.shutdown_kernel)(now=True)


@pytest.fixture(scope="module")
def up(session: Session) -> str:
    return session.magic(f"up --name {NAME} --gpus 2 --workers 2 --gpu-type {PROCESS_GPU_TYPE}")


def test_up_connects_the_kernel_through_a_port_forward(session: Session, up: str) -> None:
    # Outside Kubernetes: Ray Client goes to raylab's local relay, through the API server.
    assert f"Connected this kernel to {NAME} (ray://127.0.0.1:" in up, up
    card = session.magic(f"status {NAME}")
    assert "Phase: Ready" in card, card
    assert "Workers: 2/2 ready" in card, card
    assert f"GPUs: 2 × {PROCESS_GPU_TYPE}" in card, card
    pods = session.pods()
    assert len(pods["head"]) == 1
    assert len(pods["worker"]) == 2
    assert pods["head"][0]["spec"]["nodeName"] == "proc-cpu-0"
    assert {p["spec"]["nodeName"] for p in pods["worker"]} == {"proc-gpu-0"}


def test_gpu_tasks_run_on_the_worker_pods(session: Session, up: str) -> None:
    seen = session.value(
        "import os, socket\n"
        "@ray.remote(num_gpus=1)\n"
        "def where():\n"
        "    import time; time.sleep(1)\n"
        "    return ray.util.get_node_ip_address(), socket.gethostname(), "
        "os.environ['CUDA_VISIBLE_DEVICES']\n"
        "print(json.dumps({'gpus': ray.cluster_resources().get('GPU'),\n"
        "                  'placed': ray.get([where.remote() for _ in range(4)])}))\n"
    )
    assert seen["gpus"] == 2.0
    workers = session.pods()["worker"]
    ips = {p["status"]["podIP"]: p["metadata"]["name"] for p in workers}
    # Each task ran in a worker pod: Ray's node IP is the pod's IP, its host the pod.
    assert {(ip, host) for ip, host, _ in seen["placed"]} == set(ips.items())
    assert {devices for _, _, devices in seen["placed"]} == {"0"}  # one GPU per worker


def test_logs_show_the_head_pods_ray_log(session: Session, up: str) -> None:
    text = session.magic(f"logs {NAME}")
    assert "Ray runtime started." in text, text
    head_ip = session.pods()["head"][0]["status"]["podIP"]
    assert f"Local node IP: {head_ip}" in strip_ansi(text)


def test_a_cell_runs_as_a_job_in_the_head_pod(session: Session, up: str) -> None:
    # Through raylab's port-forward to the dashboard, with the cluster's token; the job's
    # driver runs in the head pod, and its value comes back as the cell's.
    out = session.cell(
        f"%%raycluster job kjob {K}\nimport socket\nprint('on', socket.gethostname())\n21 * 2"
    )
    head = session.pods()["head"][0]["metadata"]["name"]
    assert f"Job kjob runs on {NAME};" in out, out
    assert f"on {head}" in out, out
    assert out.rstrip().endswith("42"), out
    table = session.magic("jobs")
    row = next(line for line in table.splitlines() if line.startswith("kjob "))
    assert row.split()[1:3] == [NAME, "SUCCEEDED"], table


def strip_ansi(text: str) -> str:
    import re

    return re.sub(r"\x1b\[[0-9;]*m", "", text)


# Two 1-GPU tasks that each hold their GPU until the other runs, meeting in `folder`,
# which every pod sees: with one GPU per worker pod they run on two pods (instant tasks
# could all reuse the first worker's lease), and return as soon as both run.
MEETING = """\
import ray
@ray.remote(num_gpus=1)
def meeting(folder, i):
    import pathlib, time
    folder = pathlib.Path(folder)
    (folder / str(i)).touch()
    deadline = time.time() + 120
    while len(list(folder.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.1)
    return ray.util.get_node_ip_address()
def met(folder):
    return sorted(set(ray.get([meeting.remote(str(folder), i) for i in range(2)])))
"""

# A notebook kernel inside Kubernetes, as a single-user pod runs it: in a pod on a
# process node, with its service account's token and KUBERNETES_SERVICE_HOST from the
# kubelet. raylab connects through the head Service's DNS name, with no port-forward.
IN_CLUSTER = (
    MEETING
    + """\
import json, time, psutil, ray
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "raylab")
shell.run_line_magic("raycluster", "connect NAME --backend kuberay")
from raylab.kernel import connect
import os, pathlib, socket
meet = pathlib.Path(os.environ["SHARED_STORAGE"], "meet-" + socket.gethostname())
meet.mkdir()
@ray.remote(num_gpus=1)
def size(block):
    return len(block)
seen = {"address": connect.connected_address(), "mode": connect.connected_mode(),
        "why": connect.why_client(), "gpus": ray.cluster_resources().get("GPU"),
        "ips": met(meet)}
if seen["mode"] == "driver":
    mine = [n for n in ray.nodes() if n["Alive"]
            and n["NodeManagerAddress"] == ray.util.get_node_ip_address()]
    seen["own_node"] = [{k: v for k, v in n["Resources"].items() if k in ("CPU", "GPU")}
                        for n in mine]
    ds = ray.data.range(3000).map_batches(lambda b: {"id": b["id"] * 2})
    seen["data_sum"] = ds.sum("id")
    seen["put_read_by_worker"] = ray.get(size.remote(ray.put(b"x" * 30_000_000)))
    # Tune and Train drive from the kernel too; their results go to shared storage (a
    # folder every pod sees here, as a cluster's NFS or bucket would be).
    from ray import train, tune
    from ray.train import Checkpoint, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
    store = os.environ["SHARED_STORAGE"]
    def trial(config):
        tune.report({"score": config["x"] ** 2})
    grid = tune.Tuner(trial, param_space={"x": tune.grid_search([1, 2, 3])},
                      run_config=tune.RunConfig(storage_path=store, name="grid")).fit()
    seen["tune_scores"] = sorted(r.metrics["score"] for r in grid)
    def loop(config):
        import tempfile
        ctx = train.get_context()
        with tempfile.TemporaryDirectory() as folder:
            pathlib.Path(folder, "rank").write_text(str(ctx.get_world_rank()))
            checkpoint = Checkpoint.from_directory(folder) if ctx.get_world_rank() == 0 else None
            train.report({"ip": ray.util.get_node_ip_address()}, checkpoint=checkpoint)
    fit = DataParallelTrainer(loop, scaling_config=ScalingConfig(
        num_workers=2, use_gpu=True, resources_per_worker={"CPU": 0}),
        run_config=RunConfig(storage_path=store, name="dp")).fit()
    seen["train_error"] = repr(fit.error) if fit.error else None
    seen["train_ip"] = fit.metrics["ip"]
    with fit.checkpoint.as_directory() as folder:
        seen["train_checkpoint_rank"] = pathlib.Path(folder, "rank").read_text()
    # Ray Serve from the kernel as a user deploys: serve.run, then the in-cluster URL.
    import urllib.request
    from ray import serve
    @serve.deployment(ray_actor_options={"num_cpus": 0.01})  # a worker's, not this pod's
    class Hello:
        def __call__(self, request):
            return {"hello": ray.util.get_node_ip_address()}
    serve.run(Hello.bind(), name="hello", route_prefix="/hello")
    url = f"http://NAME-head-svc.{connect.connected_address().split('.')[1]}.svc:8000/hello"
    with urllib.request.urlopen(url, timeout=60) as answer:
        seen["serve_answer"] = json.loads(answer.read())
shell.run_line_magic("raycluster", "disconnect")
time.sleep(1)
seen["left"] = sorted(p.name() for p in psutil.process_iter()
                      if p.name() in ("raylet", "plasma_store", "gcs_server"))
print(json.dumps(seen))
""".replace("NAME", NAME)
)


def notebook_pod(name: str, shm: str, storage: Path) -> dict[str, Any]:
    """A notebook pod as Zero to JupyterHub makes one (its own service account and
    config), with a memory-backed /dev/shm of `shm` (docs/zero-to-jupyterhub.md), and
    `storage` as the shared storage Tune and Train write to."""
    return {
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": "notebook",
            "restartPolicy": "Never",
            "nodeSelector": {"raylab.io/process-node": "true"},
            "tolerations": [{"key": "raylab.io/process-node", "operator": "Exists"}],
            "containers": [{
                "name": "notebook", "image": "jupyter/singleuser:not-pulled",
                "command": ["python", "-c", IN_CLUSTER],
                "env": [{"name": "JUPYTERHUB_USER", "value": "alice"},
                        {"name": "JUPYTER_CONFIG_DIR", "value": "/mnt/jupyter"},
                        {"name": "SHARED_STORAGE", "value": str(storage)}],
                "volumeMounts": [{"name": "jupyter", "mountPath": "/mnt/jupyter"},
                                 {"name": "shm", "mountPath": "/dev/shm"}],
            }],
            "volumes": [{"name": "jupyter", "configMap": {"name": "jupyter"}},
                        {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}],
        },
    }  # fmt: skip


def test_a_kernel_inside_kubernetes_joins_the_cluster_and_drives_it(
    session: Session, up: str, request: pytest.FixtureRequest
) -> None:
    """A kernel in a pod (in-cluster config, its own service account) is a real Ray
    driver: it joins the cluster as a node that offers nothing, Ray Data and large objects
    work, and its node leaves with it. A pod whose shared memory cannot hold a Ray node
    connects through Ray Client and says why. Tune and Train run from it as well."""
    core = k8s_client.CoreV1Api(session.admin)
    ns = session.namespace
    call_json(core.create_namespaced_service_account, ns, {"metadata": {"name": "notebook"}})
    rbac = k8s_client.RbacAuthorizationV1Api(session.admin)
    call_json(rbac.create_namespaced_role_binding, ns, {
        "metadata": {"name": "raylab-notebook"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "raylab-user"},
        "subjects": [{"kind": "ServiceAccount", "name": "notebook", "namespace": ns}],
    })  # fmt: skip
    config = (session.folder / "jupyter" / "jupyter_server_config.py").read_text()
    files = {"jupyter_server_config.py": config}
    call_json(
        core.create_namespaced_config_map, ns, {"metadata": {"name": "jupyter"}, "data": files}
    )
    # Outside the folders a process-node pod gets privately (/tmp, /home): every pod sees it.
    storage = Path(tempfile.mkdtemp(prefix=f"raylab-{ns}-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(storage, ignore_errors=True))
    call_json(core.create_namespaced_pod, ns, notebook_pod("notebook", "1Gi", storage))
    call_json(core.create_namespaced_pod, ns, notebook_pod("small-shm", "64Mi", storage))

    def result(pod: str) -> dict[str, Any]:
        def finished() -> str | None:
            phase = call_json(core.read_namespaced_pod, pod, ns)["status"].get("phase")
            return str(phase) if phase in ("Succeeded", "Failed") else None

        phase = wait_until(f"the in-cluster notebook {pod} to finish", finished,
                           timeout=480, interval=1)  # fmt: skip
        log = core.read_namespaced_pod_log(pod, ns, _preload_content=False).data.decode()
        assert phase == "Succeeded", log
        found: dict[str, Any] = json.loads(
            [line for line in log.splitlines() if line.startswith("{")][-1]
        )
        return found

    workers = sorted(p["status"]["podIP"] for p in session.pods()["worker"])
    driver = result("notebook")
    assert driver["mode"] == "driver", driver["why"]
    assert driver["address"] == f"{NAME}-head-svc.{ns}.svc:6379"
    assert driver["gpus"] == 2.0
    assert driver["ips"] == workers  # GPU tasks ran on the workers, none on its own node
    assert driver["own_node"] == [{}]  # its node offers no CPU and no GPU
    assert driver["data_sum"] == 2 * sum(range(3000))  # Ray Data needs a real driver
    assert driver["put_read_by_worker"] == 30_000_000  # a worker pulled it from the pod
    assert driver["tune_scores"] == [1, 4, 9]  # a Tune grid, each trial's metric back
    assert driver["train_error"] is None  # DataParallelTrainer, 2 workers on the GPUs
    assert driver["train_checkpoint_rank"] == "0"  # the checkpoint rank 0 reported
    assert driver["train_ip"] in workers  # rank 0 trained on a GPU worker pod, not here
    assert driver["left"] == []  # no raylet left in the pod after `disconnect`
    assert driver["serve_answer"]["hello"] in workers  # the app, through the head Service
    # Ray itself counts the head and the two workers again: the kernel's node left.
    assert session.value("print(ray_nodes(3, 2))") == {"nodes": 3, "gpus": 2}

    client = result("small-shm")
    assert client["mode"] == "client", client
    assert client["address"] == f"ray://{NAME}-head-svc.{ns}.svc:10001"
    assert "/dev/shm: 64 MiB" in client["why"], client
    assert client["ips"] == workers


def test_the_version_check_reads_the_running_head(session: Session, up: str) -> None:
    # raylab's record now says Python 3.9 (as a kubectl edit, or an image tag, could);
    # the head runs the kernel's Python, and that is what the check reads.
    custom = k8s_client.CustomObjectsApi(session.admin)
    patch = {"metadata": {"annotations": {"raylab.io/python-version": "3.9"}}}
    call_json(custom.patch_namespaced_custom_object, *RAY, session.namespace, "rayclusters",
              NAME, patch)  # fmt: skip
    session.cell("%raycluster disconnect")
    status = session.magic(f"status {NAME}")
    assert "3.9" in status or "Phase: Ready" in status, status
    connected = session.magic(f"connect {NAME}")
    assert f"Connected this kernel to {NAME} (ray://127.0.0.1:" in connected, connected
    assert session.value("print(json.dumps(ray.cluster_resources().get('GPU')))") == 2.0


@pytest.fixture(scope="module")
def server(session: Session, up: str) -> Iterator[Server]:
    work = session.folder / "server"
    write_config(work / "config")
    server = Server(session.kubeconfig, work)
    try:
        yield server
    finally:
        server.stop()


def test_the_dashboard_through_the_jupyter_server_proxy(server: Server) -> None:
    base = f"{server.base}raylab/clusters/{NAME}/dashboard/"

    def fetch(path: str, body: dict[str, Any] | None = None) -> bytes:
        data = json.dumps(body).encode() if body is not None else None
        headers = {**server.headers, "Content-Type": "application/json"}
        request = urllib.request.Request(base + path, data=data, headers=headers)
        with urllib.request.urlopen(request, timeout=60) as response:
            return bytes(response.read())

    page = fetch("").decode()
    assert "<title>Ray Dashboard</title>" in page
    version = json.loads(fetch("api/version"))
    assert version["ray_version"] == ray_version()
    # The Jobs API of the cluster, then the job's log over a websocket, all proxied.
    job = json.loads(
        fetch("api/jobs/", {"entrypoint": "sleep 3; echo hello from a job on $HOSTNAME; sleep 3"})
    )
    url = base.replace("http://", "ws://") + f"api/jobs/{job['submission_id']}/logs/tail"

    async def tail() -> str:
        request = HTTPRequest(url, headers=server.headers)
        ws = await websocket_connect(request)
        text = ""
        try:
            while f"hello from a job on {NAME}-head-" not in text:
                message = await asyncio.wait_for(ws.read_message(), timeout=120)
                if message is None:
                    break
                text += str(message)
        finally:
            ws.close()
        return text

    logs = asyncio.run(tail())
    details = fetch(f"api/jobs/{job['submission_id']}").decode()
    assert "hello from a job on " + NAME + "-head-" in logs, details


def test_a_serve_app_through_the_jupyter_server_proxy(server: Server, session: Session) -> None:
    """The app the in-cluster kernel deployed (it outlives the kernel: Serve's controller is
    detached), from outside Kubernetes through the Jupyter server (a port-forward)."""
    url = f"{server.base}raylab/clusters/{NAME}/serve/hello"
    request = urllib.request.Request(url, headers=server.headers)
    with urllib.request.urlopen(request, timeout=60) as response:
        answer = json.loads(response.read())
    workers = sorted(p["status"]["podIP"] for p in session.pods()["worker"])
    assert answer["hello"] in workers
    apps = f"{server.base}raylab/clusters/{NAME}/apps"
    with urllib.request.urlopen(urllib.request.Request(apps, headers=server.headers),
                                timeout=60) as response:  # fmt: skip
        (app,) = json.loads(response.read())["serve"]["apps"]
    assert (app["name"], app["status"], app["route"]) == ("hello", "RUNNING", "/hello")
    assert app["in_cluster_url"] == f"http://{NAME}-head-svc.{session.namespace}.svc:8000/hello"


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def test_scale_is_followed_by_rays_node_count(session: Session, up: str) -> None:
    session.magic(f"scale {NAME} --workers 1")
    assert session.value("print(ray_nodes(2, 1))") == {"nodes": 2, "gpus": 1}
    session.magic(f"scale {NAME} --workers 3")
    assert session.value("print(ray_nodes(4, 3))") == {"nodes": 4, "gpus": 3}
    wait_until(
        "3 worker pods Ready",
        lambda: len([p for p in session.pods()["worker"] if pod_ready(p)]) == 3,
        timeout=120,
    )
    card = session.magic(f"status {NAME}")
    assert "Workers: 3/3 ready" in card, card


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_suspend_then_resume_and_reconnect(session: Session, up: str) -> None:
    session.magic(f"suspend {NAME}")
    wait_until("no pods left", lambda: not any(session.pods().values()), timeout=120)
    card = session.magic(f"status {NAME}")
    assert "Phase: Suspended" in card, card
    session.magic(f"resume {NAME}")
    connected = session.magic(f"connect {NAME}")
    assert f"Connected this kernel to {NAME} (ray://127.0.0.1:" in connected, connected
    assert session.value("print(ray_nodes(4, 3))") == {"nodes": 4, "gpus": 3}


def test_a_killed_head_is_reported_restarts_in_place_and_the_kernel_reconnects(
    session: Session, up: str
) -> None:
    from raylab.backends.kuberay.backend import KubeRayBackend
    from raylab.config import Settings

    settings = Settings.from_config(gpu_types={PROCESS_GPU_TYPE: process_profile()})
    backend = KubeRayBackend(settings, api_client=session.admin, namespace=session.namespace)
    custom = k8s_client.CustomObjectsApi(session.admin)
    get = custom.get_namespaced_custom_object
    uid = call_json(get, *RAY, session.namespace, "rayclusters", NAME)["metadata"]["uid"]
    (head,) = session.pods()["head"]
    # Ray's own processes in the head pod killed, as a crash would: `ray start --block`
    # sees them go and exits, and the kubelet restarts the container.
    # A client of its own: stream() swaps its ApiClient's transport while it runs.
    with k8s_client.ApiClient(session.admin.configuration) as own:
        core = k8s_client.CoreV1Api(own)
        stream(core.connect_get_namespaced_pod_exec, head["metadata"]["name"], session.namespace,
               container="ray-head", command=["ray", "stop", "--force"],
               stderr=True, stdin=False, stdout=True, tty=False)  # fmt: skip
    reason = wait_until(
        "raylab to report the head's restart",
        lambda: (i := backend.get(NAME)) and "restarted" in i.reason and i.reason,
        timeout=120,
        interval=0.3,
    )
    assert f"head pod {head['metadata']['name']} restarted: ray-head exited with" in reason
    # Nothing was deleted: the same RayCluster, the same head pod, restarted in place.
    assert call_json(get, *RAY, session.namespace, "rayclusters", NAME)["metadata"]["uid"] == uid
    (again,) = session.pods()["head"]
    assert again["metadata"]["uid"] == head["metadata"]["uid"]
    assert again["status"]["containerStatuses"][0]["restartCount"] >= 1
    connected = session.magic(f"connect {NAME}")
    assert f"Connected this kernel to {NAME}" in connected, connected
    assert session.value("print(ray_nodes(4, 3, timeout=300))") == {"nodes": 4, "gpus": 3}


def test_autoscaling_adds_a_worker_for_gpu_tasks_and_removes_it_when_idle(
    session: Session, up: str, request: pytest.FixtureRequest
) -> None:
    # The first cluster's part is done; two small clusters at most on this machine.
    session.magic(f"down {NAME}")
    out = session.magic(
        f"up --name {AUTO} --workers 1 --gpus 1 --min-workers 0 --max-workers 2 "
        f"--gpu-type {PROCESS_GPU_TYPE}"
    )
    assert f"Connected this kernel to {AUTO}" in out, out
    # Two 1-GPU tasks at once, one 1-GPU worker: Ray's autoscaler (in the head pod,
    # through the API server) asks KubeRay for a second worker, and both run.
    # Outside the folders a process-node pod gets privately (/tmp, /home).
    meet = Path(tempfile.mkdtemp(prefix=f"raylab-{session.namespace}-", dir="/var/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(meet, ignore_errors=True))
    # The second can run only on the worker pod the autoscaler adds.
    session.cell(MEETING)
    ips = session.value(f"print(json.dumps(met({str(meet)!r})))")
    assert len(ips) == 2, ips
    assert set(ips) <= {p["status"]["podIP"] for p in session.pods(AUTO)["worker"]}
    # Then idle: the autoscaler removes the workers (min 0) after its idle timeout.
    assert session.value("print(ray_nodes(1, 0, timeout=300))") == {"nodes": 1, "gpus": 0}
    wait_until("no worker pods", lambda: not session.pods(AUTO)["worker"], timeout=120)


def test_a_failing_command_shows_its_real_error_and_nothing_is_deleted(
    session: Session, up: str
) -> None:
    # Too little memory for Ray (a real user mistake): the head is OOM-killed, for real,
    # by its memory cgroup, again and again.
    error = session.fails(
        f"up --name {BROKEN} --workers 0 --memory 200Mi --gpu-type {PROCESS_GPU_TYPE} "
        "--no-connect --timeout 120"
    )
    assert f"cluster {BROKEN!r} failed: head pod {BROKEN}-head-" in error, error
    assert "CrashLoopBackOff: ray-head exited with 137 (OOMKilled): it needs more memory" in error
    assert "it was kept" in error, error
    # Nothing deleted: the RayCluster and its head pod are still there to look at.
    custom = k8s_client.CustomObjectsApi(session.admin)
    obj = call_json(
        custom.get_namespaced_custom_object, *RAY, session.namespace, "rayclusters", BROKEN
    )
    assert obj["metadata"]["name"] == BROKEN
    assert session.pods(BROKEN)["head"]
