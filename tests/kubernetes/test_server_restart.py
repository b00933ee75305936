"""A Jupyter server restarted on KubeRay finds every cluster again, owners intact.

Two real `jupyter server` processes, one after the other, with raylab as alice's
Kubernetes identity in one namespace (the documented Role), hub users named by a header
(alice, bob, and the raylab admin). The first makes clusters for alice and bob and
suspends one; it is stopped; the second, a new process with a new backend and an empty
cache, lists the same clusters, owners, phases and specs, each user sees only their own,
and ownership still decides who may delete what. Kubernetes is raylab's only memory.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from .kuberay_support import RAY, ROOT, grant, new_namespace, user_kubeconfig

# Hub users by header, as tests/server's TestUsers: the token authenticates, the header
# names the user (JupyterHub gives each server one user; this server plays several).
CONFIG = """
from jupyter_server.auth.identity import IdentityProvider, User


class HeaderUsers(IdentityProvider):
    async def get_user(self, handler):
        user = super().get_user(handler)
        if hasattr(user, "__await__"):
            user = await user
        name = handler.request.headers.get("X-Test-User")
        return User(username=name) if user is not None and name else user


c.ServerApp.identity_provider_class = HeaderUsers
c.IdentityProvider.token = {token!r}
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port = {port}
c.ServerApp.port_retries = 0
c.ServerApp.root_dir = {root!r}
c.ServerApp.open_browser = False
c.ServerApp.allow_root = True
c.ServerApp.jpserver_extensions = {{"raylab": True}}
c.Raylab.backend = "kuberay"
c.Raylab.admin_users = ["admin"]
"""
SMALL = {"workers": 0, "cpus": "100m", "memory": "256Mi"}


@dataclass
class Server:
    url: str
    token: str
    process: subprocess.Popen[bytes]
    log: Path

    def call(self, method: str, path: str, user: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}/raylab/{path}",
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "X-Test-User": user},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                raw = reply.read()
                return reply.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"null")

    def clusters(self, user: str, everyone: bool = False) -> list[dict[str, Any]]:
        code, body = self.call("GET", "clusters?all=1" if everyone else "clusters", user)
        assert code == 200, body
        assert body["available"] is True, body
        clusters: list[dict[str, Any]] = body["clusters"]
        return clusters

    def snapshot(self, user: str) -> dict[str, Any]:
        """The first message of the event stream, as a sidebar gets it on opening."""
        request = urllib.request.Request(
            f"{self.url}/raylab/events",
            headers={"Authorization": f"token {self.token}", "X-Test-User": user},
        )
        with urllib.request.urlopen(request, timeout=60) as stream:
            for raw in stream:
                line = raw.decode()
                if line.startswith("data: "):
                    message: dict[str, Any] = json.loads(line[6:])
                    return message
        raise AssertionError("the event stream ended before its snapshot")

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def jupyter_server(work: Path, kubeconfig: Path) -> Iterator[Server]:
    """`jupyter server` in a process of its own; stopped (SIGTERM, as a hub stops it) after."""
    work.mkdir(parents=True)
    (work / "root").mkdir()
    port, token = _free_port(), secrets.token_hex(16)
    config = work / "jupyter_server_config.py"
    config.write_text(CONFIG.format(token=token, port=port, root=str(work / "root")))
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "JUPYTER_CONFIG_DIR": str(work / "config"),
        "JUPYTER_DATA_DIR": str(work / "data"),
        "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    for name in ("JUPYTERHUB_USER", "KUBERNETES_SERVICE_HOST", "RAYLAB_BACKEND"):
        env.pop(name, None)
    log = work / "jupyter.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyter_server", f"--config={config}"],
            cwd=work / "root", env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    server = Server(f"http://127.0.0.1:{port}", token, process, log)
    try:

        def answers() -> bool:
            if process.poll() is not None:
                raise AssertionError(f"jupyter server exited:\n{server.tail()}")
            with contextlib.suppress(OSError):
                return server.call("GET", "profiles", "admin")[0] == 200
            return False

        wait_until("jupyter server answering", answers, timeout=120, interval=0.3)
        yield server
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


@pytest.fixture
def namespace_for_alice(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient
) -> Iterator[str]:
    with new_namespace(admin_api, "rs") as namespace:
        grant(admin_api, namespace, "alice")
        yield namespace


def seen(cluster: dict[str, Any]) -> tuple[Any, ...]:
    """What a restart must not change about a cluster."""
    return (cluster["name"], cluster["owner"], cluster["phase"], cluster["reason"],
            cluster["spec"], cluster["created"], cluster["namespace"])  # fmt: skip


def test_a_restarted_server_finds_every_cluster_with_its_owner(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    namespace_for_alice: str,
    tmp_path: Path,
) -> None:
    namespace = namespace_for_alice
    kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace, tmp_path / "kc")
    # rs once the operator has suspended it (before, it is "suspending").
    wanted = {"ra": ("Ready", ""), "rs": ("Suspended", "suspended: no pods running"),
              "rb": ("Ready", "")}  # fmt: skip

    with jupyter_server(tmp_path / "first", kubeconfig) as first:
        for name, user in (("ra", "alice"), ("rs", "alice"), ("rb", "bob")):
            code, body = first.call("POST", "clusters", user, {"name": name, **SMALL})
            assert code == 201, body
        code, body = first.call("PATCH", "clusters/rs", "alice", {"suspend": True})
        assert code == 200, body

        last: list[Any] = []

        def settled() -> list[dict[str, Any]] | None:
            clusters = first.clusters("admin", everyone=True)
            now = {c["name"]: (c["phase"], c["reason"]) for c in clusters}
            last[:] = [now]
            return clusters if now == wanted else None

        try:
            before = wait_until("ra, rb Ready and rs Suspended", settled, 120, 0.5)
        except TimeoutError as exc:
            raise AssertionError(f"{exc}; last listed: {last}\n{first.tail()}") from None
        assert {c["name"]: c["owner"] for c in before} == {
            "ra": "alice",
            "rs": "alice",
            "rb": "bob",
        }

    # Stopping the server deleted nothing: the clusters are Kubernetes objects.
    custom = k8s_client.CustomObjectsApi(admin_api)
    objects = call_json(custom.list_namespaced_custom_object, *RAY, namespace, "rayclusters")
    assert sorted(o["metadata"]["name"] for o in objects["items"]) == ["ra", "rb", "rs"]

    started = time.monotonic()
    with jupyter_server(tmp_path / "second", kubeconfig) as second:
        # As soon as it answers, it holds them: read back from Kubernetes, nothing remade.
        after = second.clusters("admin", everyone=True)
        print(f"\nsecond server listed them {time.monotonic() - started:.1f} s after its start")
        assert [seen(c) for c in after] == [seen(c) for c in before]
        assert [c["name"] for c in second.clusters("alice")] == ["ra", "rs"]
        assert [c["name"] for c in second.clusters("bob")] == ["rb"]
        snapshot = second.snapshot("alice")
        assert snapshot["type"] == "SNAPSHOT"
        assert [(c["name"], c["owner"]) for c in snapshot["clusters"]] == [
            ("ra", "alice"),
            ("rs", "alice"),
        ]

        # Ownership survived too: bob cannot see or delete alice's cluster, she can.
        code, body = second.call("DELETE", "clusters/ra", "bob")
        assert (code, body["error"]) == (404, "no cluster named 'ra'")
        for name, user in (("ra", "alice"), ("rs", "alice"), ("rb", "bob")):
            assert second.call("DELETE", f"clusters/{name}", user)[0] == 204
