"""A real `jupyter lab` for browser tests and the sidebar benchmark.

Started from `sys.executable`'s environment (raylab installed from the wheel, with its
prebuilt labextension and auto-enabled server extension), on the local backend and the
session's RAYLAB_STATE_DIR. Token and XSRF are off, as Galata's own server configuration
does, and ONLY here: the auth tests run in tests/server with auth on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = os.environ.get("RAYLAB_CHROMIUM", "/usr/bin/chromium")
# Galata's fixtures call `/api/contents` at the server's root, so the browser tests use
# the root base URL; tests/server covers a non-root one.
BASE_PATH = "/"

CONFIG = """
from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # token and XSRF off, Galata's in-page helpers
c.ServerApp.ip = "127.0.0.1"
c.ServerApp.port = {port}
c.ServerApp.port_retries = 0
c.ServerApp.base_url = {base!r}
c.ServerApp.root_dir = {root!r}
c.ServerApp.allow_root = True
c.ServerApp.open_browser = False
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.NeverCheckForUpdate"
c.Raylab.backend = "local"
{extra}
"""


@dataclass
class Lab:
    url: str  # http://127.0.0.1:PORT (no trailing slash, as Galata's baseURL wants)
    root: Path
    process: subprocess.Popen[bytes]
    log: Path

    def log_tail(self, lines: int = 80) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(lab: Lab, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(f"jupyter lab exited early:\n{lab.log_tail()}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(f"{lab.url}/raylab/profiles", timeout=5) as reply,
        ):
            if reply.status == 200:
                return
        time.sleep(0.5)
    raise RuntimeError(f"jupyter lab did not answer within {timeout:.0f}s:\n{lab.log_tail()}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)  # jupyter shuts kernels down on SIGINT/SIGTERM
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(20)
        return
    process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(10)
        return
    process.kill()
    process.wait()


@contextlib.contextmanager
def running_lab(
    extra_config: str = "", timeout: float = 90.0, extra_env: Mapping[str, str] | None = None
) -> Iterator[Lab]:
    """Start `jupyter lab` in a temporary root folder; stop it (and its kernels) after.
    `extra_env` goes to the server, so to its kernels and the clusters it starts."""
    work = Path(tempfile.mkdtemp(prefix="raylab-ui-"))
    root = work / "root"
    root.mkdir()
    port = free_port()
    config = work / "jupyter_server_config.py"
    config.write_text(CONFIG.format(port=port, base=BASE_PATH, root=str(root), extra=extra_config))
    log = work / "jupyter.log"
    env = dict(os.environ)
    # The kernels the server starts must import the same raylab and Ray.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["RAYLAB_BACKEND"] = "local"
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.update(extra_env or {})
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "jupyterlab", f"--config={config}"],
            cwd=root,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    lab = Lab(f"http://127.0.0.1:{port}{BASE_PATH.rstrip('/')}", root, process, log)
    try:
        _wait_ready(lab, timeout)
        yield lab
    finally:
        _stop(process)
        shutil.rmtree(work, ignore_errors=True)


def playwright_env(lab: Lab, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        RAYLAB_UI_URL=lab.url,
        RAYLAB_CHROMIUM=CHROMIUM,
        PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1",
        CI="1",
    )
    env.update(extra)
    return env
