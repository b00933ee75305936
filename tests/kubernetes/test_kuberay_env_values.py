"""`--env KEY=VALUE` on KubeRay: the value reaches the worker pods and nothing Ray logs.

A real kernel (nbclient), as alice outside Kubernetes, brings up a head and one worker
on the process nodes (harness/processnodes.py: the pods really run Ray) with a value,
then connects again with another. Each time a task on the worker pod must see the value
of its connection, and the value must be in none of the files Ray keeps in the pods
(read through the pods' exec, as kubectl would: runtime-env agent, Ray Client server,
GCS, raylet, workers) nor in any process's command line or initial environment on this
machine (the pods' processes included). The pods' Ray is this machine's, but nothing
here relies on raylab being importable in them.
"""

from __future__ import annotations

import base64
import contextlib
import io
import json
import secrets
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import nbformat
import psutil
import pytest
from controlplane import ControlPlane
from jupyter_core.utils import run_sync
from kubernetes import client as k8s_client
from kubernetes.stream import stream
from nbclient import NotebookClient
from processnodes import PROCESS_GPU_TYPE, process_profile

from .kuberay_support import grant, new_namespace, ray_pods, user_kubeconfig

NAME = "kenv"
K = "--backend kuberay"
VAR = "KENV_SECRET"
# Random per run, so that nothing left from an earlier run can match.
FIRST = f"first-{secrets.token_hex(8)}"
SECOND = f"second-{secrets.token_hex(8)}"

# A task on the worker pod (the head has no GPU): its process, pod and the value.
ON_WORKER = f"""\
import json, os, socket, ray
@ray.remote(num_gpus=1)
def seen():
    return os.getpid(), socket.gethostname(), os.environ.get({VAR!r})
print(json.dumps(ray.get(seen.remote(), timeout=180)))
"""


@dataclass
class Kernel:
    client: NotebookClient
    namespace: str
    admin: k8s_client.ApiClient

    def cell(self, source: str) -> str:
        cell = nbformat.v4.new_code_cell(source)
        self.client.nb.cells.append(cell)
        done = self.client.execute_cell(cell, len(self.client.nb.cells) - 1)
        return "".join(
            out.text if out.output_type == "stream" else out.get("data", {}).get("text/plain", "")
            for out in done.outputs
        )

    def value(self, source: str) -> Any:
        """The JSON a cell prints on its last line (Ray's own messages may come first)."""
        out = self.cell(source)
        return json.loads(out.strip().splitlines()[-1])

    def pods(self) -> list[dict[str, Any]]:
        return ray_pods(self.admin, self.namespace, NAME)


@pytest.fixture(scope="module")
def kernel(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    process_nodes: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Kernel]:
    folder = tmp_path_factory.mktemp("kuberay-env")
    (folder / "jupyter").mkdir()
    (folder / "jupyter" / "jupyter_server_config.py").write_text(
        f"c.Raylab.gpu_types = {{{PROCESS_GPU_TYPE!r}: {process_profile()!r}}}\n"
        f"c.Raylab.default_gpu_type = {PROCESS_GPU_TYPE!r}\n"
        "c.Raylab.wait_timeout = 300.0\n"
    )
    notebook = folder / "notebook"  # the kernel's folder, synced: small
    notebook.mkdir()
    with new_namespace(admin_api, "kenv") as namespace, pytest.MonkeyPatch.context() as env:
        grant(admin_api, namespace, "alice")
        kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace, folder / "kc")
        env.setenv("KUBECONFIG", str(kubeconfig))
        env.setenv("JUPYTERHUB_USER", "alice")
        env.setenv("JUPYTER_CONFIG_DIR", str(folder / "jupyter"))
        env.setenv("JUPYTER_DATA_DIR", str(folder / "data"))
        env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        client = NotebookClient(
            nbformat.v4.new_notebook(), timeout=600, kernel_name="python3",
            resources={"metadata": {"path": str(notebook)}},
        )  # fmt: skip
        with client.setup_kernel():
            k = Kernel(client, namespace, admin_api)
            k.cell("%load_ext raylab")
            try:
                yield k
            finally:
                with contextlib.suppress(Exception):
                    k.cell(f"%raycluster down {NAME} {K}")
                if client.km is not None:
                    run_sync(client.km.shutdown_kernel)(now=True)


def ray_files(admin: k8s_client.ApiClient, namespace: str, pod: dict[str, Any]) -> dict[str, bytes]:
    """Every file under the pod's /tmp/ray (Ray's sessions and logs), through exec."""
    container = pod["spec"]["containers"][0]["name"]
    script = "tar -C /tmp/ray -cz . 2>/dev/null | base64 -w0"
    # A client of its own: stream() swaps its ApiClient's transport while it runs.
    with k8s_client.ApiClient(admin.configuration) as own:
        out = stream(
            k8s_client.CoreV1Api(own).connect_get_namespaced_pod_exec,
            pod["metadata"]["name"], namespace, container=container,
            command=["sh", "-c", script], stderr=False, stdin=False, stdout=True, tty=False,
        )  # fmt: skip
    files = {}
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(out)), mode="r:gz") as tar:
        for member in tar.getmembers():
            fh = tar.extractfile(member) if member.isfile() else None
            if fh is not None:
                files[f"{pod['metadata']['name']}:{member.name}"] = fh.read()
    return files


def process_texts() -> list[str]:
    """Each process's command line and initial environment on this machine."""
    texts = []
    for proc in psutil.process_iter(["cmdline"]):
        texts.append(" ".join(proc.info["cmdline"] or ()))
        with contextlib.suppress(psutil.Error):
            texts.extend(f"{k}={v}" for k, v in proc.environ().items())
    return texts


def assert_shown_nowhere(kernel: Kernel, value: str) -> None:
    files: dict[str, bytes] = {}
    for pod in kernel.pods():
        files.update(ray_files(kernel.admin, kernel.namespace, pod))
    names = "\n".join(files)
    # What was read is Ray's own: these logs are where the values used to show.
    assert "/logs/runtime_env_agent.log" in names, names
    assert "/logs/ray_client_server" in names, names
    assert [f for f, data in files.items() if value.encode() in data] == []
    assert [t for t in process_texts() if value in t] == []


@pytest.fixture(scope="module")
def first(kernel: Kernel) -> Any:
    out = kernel.cell(
        f"%raycluster up --name {NAME} --workers 1 --gpus 1 --gpu-type {PROCESS_GPU_TYPE} "
        f"--env {VAR}={FIRST} {K}"
    )
    assert f"Connected this kernel to {NAME}" in out, out
    return kernel.value(ON_WORKER)


def test_a_worker_pod_sees_the_value(kernel: Kernel, first: Any) -> None:
    _, host, value = first
    pods = kernel.pods()
    workers = [
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["labels"]["ray.io/node-type"] == "worker"
    ]
    assert host in workers, (host, workers)
    assert value == FIRST


def test_the_value_is_in_no_ray_file_and_no_command_line(kernel: Kernel, first: Any) -> None:
    assert_shown_nowhere(kernel, FIRST)


def test_a_new_value_reaches_new_workers(kernel: Kernel, first: Any) -> None:
    out = kernel.cell(f"%raycluster connect {NAME} --env {VAR}={SECOND} {K}")
    assert f"Connected this kernel to {NAME}" in out, out
    pid, host, value = kernel.value(ON_WORKER)
    assert (host, value) == (first[1], SECOND)
    assert pid != first[0]  # a worker of the new connection
    assert_shown_nowhere(kernel, SECOND)
    assert_shown_nowhere(kernel, FIRST)
