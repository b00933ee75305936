"""The processes behind local nodes: start one in its own session, tell if it lives, end it."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from ...auth import AUTH_ENV
from ..base import CLIENT_SERVER_ENV
from .node import running, same_process, started
from .tempdir import is_inside, private_temp_root

# Every process of a node carries its cluster's name here (set at spawn, inherited by
# Ray's own processes): a process without it is never signalled for that cluster.
CLUSTER_ENV = "RAYLAB_CLUSTER"
NODE_ENV = "RAYLAB_NODE"  # head, worker-1, ...

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
    # with their own (backend.py); see the README on security.
    "RAY_AUTH_MODE": "disabled",
    **CLIENT_SERVER_ENV,
}


# The module a standby's reaper runs (standby_reaper.py), named rather than imported: it
# imports the backend, which starts it.
REAPER_MODULE = "raylab.backends.local.standby_reaper"


def start_reaper(state_dir: Path, name: str, uid: str) -> None:
    """Start the process that ends the standby `name` (whose uid is `uid`) at its time."""
    subprocess.Popen(
        [sys.executable, "-m", REAPER_MODULE, str(state_dir), name, uid],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the kernel or server that made it
    )


@dataclass
class NodeProcess:
    role: str  # "head" | "worker"
    index: int  # 0 for the head, 1.. for workers
    pid: int  # also the session id of everything the node spawned
    started: float  # tells our process from a later one that reused the pid (node.started)
    log: str
    temp_dir: str = ""  # the node's own Ray temp dir (sockets, session logs)
    ports: dict[str, int] = field(default_factory=dict)  # its agents' ports (ports.py)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeProcess:
        if "create_time" in data and "started" not in data:
            # Written by an earlier raylab: psutil's wall-clock creation time.
            old = data
            data = {k: v for k, v in old.items() if k != "create_time"}
            data["started"] = _since_boot(old["create_time"])
        return cls(**data)

    def well_typed(self) -> bool:
        return (
            isinstance(self.role, str)
            and isinstance(self.index, int)
            and isinstance(self.pid, int)
            and isinstance(self.started, int | float)
            and isinstance(self.log, str)
            and isinstance(self.temp_dir, str)
            and isinstance(self.ports, dict)
        )


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
    # A job's entrypoint (`python …`) runs under the head: the kernel's own Python first,
    # even where the kernel was started without its environment on PATH.
    here = os.path.dirname(sys.executable)
    path = full_env.get("PATH", "")
    if path.split(os.pathsep)[0] != here:
        full_env["PATH"] = os.pathsep.join([here, path]) if path else here
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
    at = started(proc.pid) or 0.0
    return NodeProcess(role, index, proc.pid, at, str(log), temp_dir, ports or {})


def _since_boot(create_time: Any) -> Any:
    if not isinstance(create_time, int | float) or not sys.platform.startswith("linux"):
        return create_time
    return create_time - psutil.boot_time()


def alive(node: NodeProcess) -> bool:
    return running(node.pid, node.started)


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


def belongs(proc: psutil.Process, cluster: str) -> bool:
    """Whether `proc` is one of `cluster`'s Ray processes that this user started: its
    own user's, carrying the cluster's name. A pid read from a state file is only a
    claim (the file may be old, or edited): it is believed when the process agrees."""
    try:
        return proc.uids().real == os.getuid() and proc.environ().get(CLUSTER_ENV) == cluster
    except psutil.Error:
        return False


def stop_sessions(nodes: Iterable[NodeProcess], cluster: str, grace: float = 15.0) -> None:
    """End every process the nodes started (SIGTERM, then SIGKILL whatever is left), and
    remove their Ray temp dirs. Only `cluster`'s own processes are signalled, and only
    temp dirs inside this user's private temp root are removed."""
    nodes = list(nodes)
    _end_sessions(nodes, cluster, grace)
    root = private_temp_root()
    for node in nodes:
        if node.temp_dir and is_inside(node.temp_dir, root):
            shutil.rmtree(node.temp_dir, ignore_errors=True)


def _end_sessions(nodes: list[NodeProcess], cluster: str, grace: float) -> None:
    sids = {n.pid for n in nodes if n.started}
    ours = [p for p in session_members(sids) if belongs(p, cluster)]
    if not ours:
        return
    sids = {sid for p in ours if (sid := _sid(p)) is not None}
    for node in nodes:
        leader = _process(node)
        if node.pid in sids and leader is not None and belongs(leader, cluster):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(node.pid, signal.SIGTERM)  # `ray start --block` stops its children
    if _wait_gone(sids, cluster, 5.0):
        return
    # Anything that left the process group (but not the session) gets its own signal.
    for escalate, wait in ((psutil.Process.terminate, grace), (psutil.Process.kill, 5.0)):
        for proc in session_members(sids):
            if belongs(proc, cluster):
                with contextlib.suppress(psutil.Error):
                    escalate(proc)
        if _wait_gone(sids, cluster, wait):
            return


def _sid(proc: psutil.Process) -> int | None:
    try:
        return os.getsid(proc.pid)
    except OSError:
        return None


def _process(node: NodeProcess) -> psutil.Process | None:
    """The node's own process, if it still runs (not a later one with its pid)."""
    return same_process(node.pid, node.started)


def _wait_gone(sids: set[int], cluster: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        live = [p for p in session_members(sids) if belongs(p, cluster) and _not_zombie(p)]
        if not live:
            return True
        time.sleep(0.1)
    return False


def _not_zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
