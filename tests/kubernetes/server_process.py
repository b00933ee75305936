"""A real `jupyter server` with raylab over KubeRay, as alice, in a process of its own.

For the load test and the server benchmarks (bench/ imports this module): a server in
its own process is measured alone (its latency, its memory) and is loaded by clients
that do not share its event loop. `seed` fills its namespace with RayClusters exactly as
raylab writes them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from .kuberay_support import RAY, ROOT, grant, new_namespace, user_kubeconfig

# Quotas out of the way: benchmarks seed hundreds of 2-GPU clusters for alice.
NO_QUOTAS = ("--Raylab.max_clusters_per_user=100000", "--Raylab.max_gpus_per_user=1000000")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """`jupyter server` with raylab on the KubeRay backend, as alice, in a temp home."""

    def __init__(self, kubeconfig: Path, work: Path, options: Sequence[str] = NO_QUOTAS) -> None:
        """`options`: raylab's settings on the command line (`--Raylab.x=y`)."""
        self.port = _free_port()
        self.token = secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}/"
        self.log_path = work / "server.log"
        env = dict(
            os.environ,
            KUBECONFIG=str(kubeconfig),
            RAYLAB_BACKEND="kuberay",
            JUPYTER_CONFIG_DIR=str(work / "config"),
            JUPYTER_DATA_DIR=str(work / "data"),
            JUPYTER_RUNTIME_DIR=str(work / "runtime"),
            # ROOT: the identity provider below is tests.kubernetes.hub_user.
            PYTHONPATH=os.pathsep.join([str(ROOT), *sys.path]),
        )
        self.log = open(self.log_path, "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--port={self.port}",
             "--ip=127.0.0.1", f"--IdentityProvider.token={self.token}", "--no-browser",
             "--allow-root", *options,
             "--ServerApp.identity_provider_class=tests.kubernetes.hub_user.HubUser",
             "--ServerApp.jpserver_extensions={'raylab': True}"],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                self.get("api/status")
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"jupyter server did not start:\n{self.log_tail()}")

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"token {self.token}"}

    def get(self, path: str) -> Any:
        req = urllib.request.Request(self.base + path, headers=self.headers)
        with urllib.request.urlopen(req, timeout=60) as resp:
            return json.load(resp)

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        """(HTTP status, JSON body), errors included."""
        req = urllib.request.Request(
            self.base + path, data=json.dumps(body).encode(), method="POST",
            headers={**self.headers, "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=120) as resp:
                return resp.status, json.load(resp)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)

    def log_tail(self, lines: int = 40) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


@contextlib.contextmanager
def raylab_server(
    plane: Any, work: Path, prefix: str = "bench", options: Sequence[str] = NO_QUOTAS
) -> Iterator[tuple[Server, str]]:
    """A fresh namespace with the documented Role for alice, and her server on it."""
    with plane.api_client("admin") as admin, new_namespace(admin, prefix) as namespace:
        grant(admin, namespace, "alice")
        kubeconfig = user_kubeconfig(plane.kubeconfig("alice"), namespace, work / "kc")
        server = Server(kubeconfig, work, options)
        try:
            yield server, namespace
        finally:
            server.stop()


def seed(admin: Any, namespace: str, owner: str, count: int) -> list[str]:
    """`count` suspended RayClusters owned by `owner`, exactly as raylab writes them.

    Suspended: the operator makes no pods for them, so hundreds cost only their objects.
    Returns their names."""
    from kubernetes import client

    from raylab.backends.kuberay.manifest import raycluster_manifest
    from raylab.profiles import Profiles
    from raylab.spec import ClusterSpec

    profiles = Profiles()
    custom = client.CustomObjectsApi(admin)
    names = []
    for i in range(count):
        spec = ClusterSpec.from_mapping(
            {"name": f"load-{i:04d}", "gpus": 2, "workers": 1}, profiles
        )
        body = raycluster_manifest(
            spec, profiles.gpu_types[spec.gpu_type], owner=owner, namespace=namespace,
            image="rayproject/ray:2.60.0-py311-gpu", ray_version="2.60.0",
        )  # fmt: skip
        body["spec"]["suspend"] = True
        custom.create_namespaced_custom_object(*RAY, namespace, "rayclusters", body)
        names.append(spec.name)
    return names
