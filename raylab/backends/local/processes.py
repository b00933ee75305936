"""The processes behind local nodes: start one in its own session, tell if it lives, end it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ...auth import AUTH_ENV
from ..base import CLIENT_SERVER_ENV

# Ray's variables a kernel may carry that must not leak into a new cluster's processes
# (among them the token of the cluster the kernel is connected to).
_STRIP_ENV = ("RAY_ADDRESS", "RAY_NAMESPACE", "RAY_JOB_CONFIG_JSON_ENV_VAR", *AUTH_ENV)
_RAY_ENV = {
    "RAY_USAGE_STATS_ENABLED": "0",
    # `down` means now: skip Ray's 30 s drain on SIGTERM (meant for Serve upgrades).
    "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
    # The raylet gives its Python dashboard agent 30 s to report its port, then aborts;
    # on a busy laptop that agent's imports alone can take longer.
    "RAY_agent_register_timeout_ms": "120000",
    # `ray start --head` gives the dashboard 60 s to come up, then exits; the dashboard
    # starts a process per module, which on two busy cores can take longer. A dashboard
    # that crashes is still reported at once (its exit is watched, not this limit).
    "RAY_DASHBOARD_STARTUP_TIMEOUT_S": "600",
    # Ray 2.60 turns token auth on for `ray start` whenever ~/.ray/auth_token exists
    # (any local `ray.init()` writes one): state it, so a cluster made with auth off
    # behaves the same on every machine. Clusters with a token (the default) replace it
    # with their own (local.py); see the README on security.
    "RAY_AUTH_MODE": "disabled",
    **CLIENT_SERVER_ENV,
}


@dataclass
class NodeProcess:
    role: str  # "head" | "worker"
    index: int  # 0 for the head, 1.. for workers
    pid: int  # also the session id of everything the node spawned
    create_time: float  # tells our process from a later one that reused the pid
    log: str
    temp_dir: str = ""  # the node's own Ray temp dir (sockets, session logs)
    ports: dict[str, int] = field(default_factory=dict)  # its agents' ports (local_ports.py)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeProcess:
        return cls(**data)


def spawn(
    argv: list[str],
    log: Path,
    role: str,
    index: int,
    env: dict[str, str],
    temp_dir: str = "",
    ports: dict[str, int] | None = None,
) -> NodeProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in _STRIP_ENV}
    full_env.update(_RAY_ENV)
    full_env.update(env)
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
            env=full_env,
            # Own session: survives the kernel's process-group kill, and can be ended
            # whole with one killpg.
            start_new_session=True,
        )
    # Reap it when it exits, so a dead node is not a zombie that still looks alive.
    threading.Thread(target=proc.wait, daemon=True, name=f"raylab-reap-{proc.pid}").start()
    try:
        created = psutil.Process(proc.pid).create_time()
    except psutil.Error:
        created = 0.0
    return NodeProcess(role, index, proc.pid, created, str(log), temp_dir, ports or {})


def alive(node: NodeProcess) -> bool:
    try:
        proc = psutil.Process(node.pid)
        if abs(proc.create_time() - node.create_time) > 0.5:
            return False  # the pid now belongs to someone else
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


_started: set[tuple[str, int]] = set()


def log_started(node: NodeProcess, marker: str) -> bool:
    """Whether the node's `ray start` printed `marker` (it does once the node is up)."""
    key = (node.log, node.pid)
    if key in _started:
        return True
    try:
        with open(node.log, errors="replace") as fh:
            found = marker in fh.read(256 * 1024)
    except OSError:
        return False
    if found:
        _started.add(key)
    return found


def session_members(sids: set[int]) -> list[psutil.Process]:
    members = []
    for proc in psutil.process_iter():
        with contextlib.suppress(OSError, psutil.Error):
            if os.getsid(proc.pid) in sids:
                members.append(proc)
    return members


def stop_sessions(nodes: Iterable[NodeProcess], grace: float = 15.0) -> None:
    """End every process the nodes started (SIGTERM, then SIGKILL whatever is left), and
    remove their Ray temp dirs."""
    nodes = list(nodes)
    _end_sessions(nodes, grace)
    for node in nodes:
        if node.temp_dir:
            shutil.rmtree(node.temp_dir, ignore_errors=True)


def _end_sessions(nodes: list[NodeProcess], grace: float) -> None:
    sids = {n.pid for n in nodes if n.create_time and (alive(n) or _session_exists(n.pid))}
    if not sids:
        return
    for sid in sids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(sid, signal.SIGTERM)  # `ray start --block` then stops its children
    if _wait_gone(sids, 5.0):
        return
    # Anything that left the process group (but not the session) gets its own signal.
    for escalate, wait in ((psutil.Process.terminate, grace), (psutil.Process.kill, 5.0)):
        for proc in session_members(sids):
            with contextlib.suppress(psutil.Error):
                escalate(proc)
        if _wait_gone(sids, wait):
            return


def _session_exists(sid: int) -> bool:
    return bool(session_members({sid}))


def _wait_gone(sids: set[int], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [p for p in session_members(sids) if _not_zombie(p)]
        if not live:
            return True
        time.sleep(0.1)
    return False


def _not_zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
