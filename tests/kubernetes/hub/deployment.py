"""A real JupyterHub behind its real proxy, on loopback, made from the documented values.

configurable-http-proxy (npm) runs as a process of its own, as its pod does in Zero to
JupyterHub, so it and the users' servers outlive a hub restart; the hub (PyPI
`jupyterhub`) runs jupyterhub_config.py beside this file. Every process it starts
carries RAYLAB_TEST_HUB in its environment, so nothing outlives the fixture.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import psutil
from controlplane import wait_until

from ..kuberay_support import ROOT
from .documented import culler_service, raylab_config

HERE = Path(__file__).resolve().parent
CHP = ROOT / "node_modules" / ".bin" / "configurable-http-proxy"
MARKER = "RAYLAB_TEST_HUB"
# Fixed test passwords (the hub's SharedPasswordAuthenticator wants 8 and 32 characters).
USER_PASSWORD = "raylab-test-user-password"
ADMIN_PASSWORD = "raylab-test-admin-password-of-32-chars"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Hub:
    work: Path
    values: dict[str, Any]  # the documented Helm values
    overlay: dict[str, Any]  # what the tests add to raylab's config (c.Raylab)
    kubeconfigs: dict[str, str]  # service account -> kubeconfig
    culler_kubeconfig: str
    users: list[str]
    admin: str = "admin"
    config: ClassVar[Path] = HERE / "jupyterhub_config.py"  # the hub's jupyterhub_config.py
    port: int = field(default_factory=free_port)
    hub_port: int = field(default_factory=free_port)
    proxy_api_port: int = field(default_factory=free_port)
    api_token: str = field(default_factory=lambda: secrets.token_hex(16))
    proxy_token: str = field(default_factory=lambda: secrets.token_hex(16))
    _proxy: subprocess.Popen[bytes] | None = None
    _hub: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.work / "jupyterhub.log"

    def log_tail(self, lines: int = 60) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])

    # ---- what the tests deploy

    def _config_path(self, pod: str) -> str:
        """JUPYTER_CONFIG_PATH of a process standing in for a `pod` (singleuser, hub):
        the tests' additions, then the documented file where the chart mounts it (a
        folder of Jupyter's config path, /usr/local/etc/jupyter, here one per pod).
        Folders on JUPYTER_CONFIG_PATH outrank JUPYTER_CONFIG_DIR, so both go there."""
        folders = {
            self.work / "tests-jupyter": self.overlay,
            self.work / f"{pod}-usr-local-etc-jupyter": raylab_config(self.values, pod),
        }
        for folder, data in folders.items():
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "jupyter_server_config.json").write_text(json.dumps(data, indent=2))
        return os.pathsep.join(str(folder) for folder in folders)

    def _deployment(self) -> dict[str, Any]:
        environment = {
            **self.values["singleuser"]["extraEnv"],
            "JUPYTER_CONFIG_PATH": self._config_path("singleuser"),
            "RAY_USAGE_STATS_ENABLED": "0",
            MARKER: str(self.work),
        }
        culler = copy.deepcopy(culler_service(self.values))
        culler["environment"] = {
            **culler.get("environment", {}),
            "JUPYTER_CONFIG_PATH": self._config_path("hub"),
            "KUBECONFIG": self.culler_kubeconfig,  # stands in for the hub pod's account
            "RAY_USAGE_STATS_ENABLED": "0",
            MARKER: str(self.work),
        }
        return {
            "work": str(self.work),
            "port": self.port,
            "hub_port": self.hub_port,
            "proxy_api_port": self.proxy_api_port,
            "proxy_token": self.proxy_token,
            "api_token": self.api_token,
            "user_password": USER_PASSWORD,
            "admin_password": ADMIN_PASSWORD,
            "users": self.users,
            "admin": self.admin,
            "singleuser": str(Path(sys.executable).parent / "jupyterhub-singleuser"),
            "environment": environment,
            "extra_config": list(self.values["hub"]["extraConfig"].values()),
            "kubeconfigs": self.kubeconfigs,
            "services": [culler],
        }

    # ---- processes

    def start(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        (self.work / "deployment.json").write_text(json.dumps(self._deployment(), indent=2))
        self._start_proxy()
        self.start_hub()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "KUBE"))}
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        env[MARKER] = str(self.work)
        env["RAYLAB_HUB_DEPLOYMENT"] = str(self.work / "deployment.json")
        return env

    def _start_proxy(self) -> None:
        env = {**self._env(), "CONFIGPROXY_AUTH_TOKEN": self.proxy_token}
        hub = f"http://127.0.0.1:{self.hub_port}"
        with (self.work / "proxy.log").open("ab") as out:
            self._proxy = subprocess.Popen(
                [str(CHP), "--ip", "127.0.0.1", "--port", str(self.port),
                 "--api-ip", "127.0.0.1", "--api-port", str(self.proxy_api_port),
                 "--default-target", hub, "--error-target", f"{hub}/hub/error"],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

    def start_hub(self) -> None:
        with self.log.open("ab") as out:
            self._hub = subprocess.Popen(
                [sys.executable, "-m", "jupyterhub", f"--config={self.config}"],
                cwd=self.work, env=self._env(), stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

        def up() -> bool:
            if self._hub is not None and self._hub.poll() is not None:
                raise RuntimeError(f"jupyterhub exited:\n{self.log_tail()}")
            with contextlib.suppress(OSError, ValueError):
                return bool(self.api("GET", "")["version"])
            return False

        wait_until("the hub to answer through its proxy", up, timeout=120, interval=0.5)

    def stop_hub(self) -> None:
        """SIGTERM, as Kubernetes stops the hub's pod: servers and proxy stay."""
        if self._hub is None:
            return
        self._hub.send_signal(signal.SIGTERM)
        try:
            self._hub.wait(30)
        except subprocess.TimeoutExpired:
            self._hub.kill()
            self._hub.wait(10)
        self._hub = None

    # ---- the hub's REST API, as its idle culler calls it

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}/hub/api/{path}", data=data, method=method,
            headers={"Authorization": f"token {self.api_token}",
                     "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(request, timeout=30) as reply:
            text = reply.read()
        return json.loads(text) if text else None

    def status_of(self, path: str) -> int:
        """The HTTP status that the proxy answers `path` with, without credentials."""
        try:
            with urllib.request.urlopen(f"{self.url}{path}", timeout=10) as reply:
                return int(reply.status)
        except urllib.error.HTTPError as err:
            return err.code

    def server_of(self, user: str) -> dict[str, Any] | None:
        server: dict[str, Any] | None = self.api("GET", f"users/{user}")["servers"].get("")
        return server

    def stop_server(self, user: str) -> None:
        """What jupyterhub-idle-culler does to an idle server: DELETE it, wait for it."""
        with contextlib.suppress(urllib.error.HTTPError):  # already stopped
            self.api("DELETE", f"users/{user}/server")
        wait_until(f"{user}'s server to stop", lambda: self.server_of(user) is None, timeout=90)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            if self._hub is not None:
                for user in [*self.users, self.admin]:
                    if self.server_of(user) is not None:
                        self.stop_server(user)
        self.stop_hub()
        if self._proxy is not None:
            self._proxy.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proxy.wait(10)
        self._kill_leftovers()

    def _kill_leftovers(self) -> None:
        for proc in psutil.process_iter():
            with contextlib.suppress(psutil.Error):
                if proc.pid != os.getpid() and proc.environ().get(MARKER) == str(self.work):
                    proc.kill()


@contextlib.contextmanager
def running_hub(hub: Hub) -> Iterator[Hub]:
    try:
        hub.start()
        yield hub
    finally:
        hub.close()
