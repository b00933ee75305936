"""The kernel's own Ray node in a cluster whose pods share its network (KubeRay, with the
notebook in a pod of the same Kubernetes).

A Ray driver needs a raylet on its own machine: `ray.init("HOST:6379")` from a pod without
one is refused. So the kernel joins the cluster as a node that offers nothing to schedule
(no CPUs, no GPUs) and drives the cluster through it: `ray.put` is a copy into this pod's
shared memory that workers pull from, and each call is one hop. The node is the kernel's:
it leaves when the kernel disconnects, switches cluster or exits, and a supervisor
watching the kernel's pid ends it even when the kernel is killed outright, so no raylet is
left in the user's pod.

Run as `python -m raylab.kernel.joined_node KERNEL_PID LOG -- COMMAND` (the supervisor, over
the local backend's node supervisor and its `ray start ... --block`); `join` starts it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from ..backends.kuberay.manifest import KERNEL_NODE_PORTS
from ..backends.local.ports import AGENT_PORTS, PortPicker, bindable
from ..backends.local.ray_start import quick_ray_start

READY_TEXT = "Ray runtime started"
JOIN_TIMEOUT_S = 120.0  # up to NODE_TRIES starts of `ray start` on a busy machine
NODE_TRIES = 3
POLL_S = 0.05  # how often `join` reads the node's log for Ray's "started" line
# The object store: 30 % of the pod's memory as Ray would take, but within its /dev/shm
# (Ray falls back to a slow disk-backed store beyond it) and small beside the workers'.
OBJECT_STORE_SHARE = 0.3
SHM_SHARE = 0.8
OBJECT_STORE_MAX_BYTES = 4 * 1024**3
OBJECT_STORE_MIN_BYTES = 100 * 1024**2  # Ray refuses less than 75 MiB


class JoinFailed(Exception):
    """This pod cannot join the cluster; `reason` says why and what to do, in one line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class JoinedNode:
    """A running node of this kernel; `leave` ends it (idempotent)."""

    supervisor: subprocess.Popen[bytes]
    log: Path
    ports: tuple[int, int]  # node manager, object manager

    def leave(self, timeout: float = 15.0) -> None:
        if self.supervisor.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.supervisor.send_signal(signal.SIGTERM)
            try:
                self.supervisor.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.supervisor.pid, signal.SIGKILL)
                self.supervisor.wait(5)
        shutil.rmtree(self.log.parent, ignore_errors=True)


def object_store_bytes(shm: Path = Path("/dev/shm")) -> int:
    """What this node's object store may hold; JoinFailed when shared memory is too small
    for Ray's minimum."""
    try:
        shm_bytes = shutil.disk_usage(shm).total
    except OSError:
        shm_bytes = 0
    wanted = min(int(_memory_limit() * OBJECT_STORE_SHARE), int(shm_bytes * SHM_SHARE))
    if wanted < OBJECT_STORE_MIN_BYTES:
        have = f"{shm_bytes // 1024**2} MiB" if shm_bytes else "none"
        raise JoinFailed(
            f"this pod's shared memory (/dev/shm: {have}) is too small for a Ray node; give "
            "the notebook pod a memory-backed /dev/shm of at least 512 MiB "
            "(docs/zero-to-jupyterhub.md)"
        )
    return min(wanted, OBJECT_STORE_MAX_BYTES)


def _memory_limit() -> int:
    """The pod's memory limit (its cgroup's), else the machine's memory."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        with contextlib.suppress(OSError, ValueError):
            limit = int(Path(path).read_text().strip())
            if limit < psutil.virtual_memory().total:
                return limit
    return int(psutil.virtual_memory().total)


def free_ports() -> tuple[int, int]:
    """The first free (node manager, object manager) pair of the range the cluster's
    NetworkPolicies and the notebook pod's admit: one pair per kernel of the pod."""
    low, high = KERNEL_NODE_PORTS
    for first in range(low, high, 2):
        if bindable(first) and bindable(first + 1):
            return first, first + 1
    raise JoinFailed(
        f"every port pair of {low}-{high} is taken in this pod (one per connected kernel); "
        "disconnect a kernel that no longer needs its cluster"
    )


def join(gcs: str, timeout: float = JOIN_TIMEOUT_S) -> JoinedNode:
    """Start this kernel's node in the cluster at `gcs` (HOST:PORT) and wait until it is
    up. The environment already holds the cluster's token (auth.use_token)."""
    store = object_store_bytes()
    # The kernel drives the cluster, so its Python has Ray (the `ray` command is not needed).
    ray_start = quick_ray_start()
    if ray_start is None:
        raise JoinFailed("Ray is not installed in this kernel's Python")
    ports = free_ports()
    # Every agent's port given up front, as local nodes have them (backends/local/ports.py):
    # a raylet left to wait for its agents to pick theirs registers only once the
    # dashboard agent has loaded, ~1.4 s later on two busy cores, and the kernel waits.
    agents = PortPicker().take_many(AGENT_PORTS)
    folder = Path(tempfile.mkdtemp(prefix="raylab-node-"))
    log = folder / "ray-start.log"
    argv = [
        *ray_start, f"--address={gcs}", "--num-cpus=0", "--num-gpus=0",
        f"--object-store-memory={store}", f"--node-manager-port={ports[0]}",
        f"--object-manager-port={ports[1]}", *(f"--{flag}={port}" for flag, port in agents.items()),
        f"--temp-dir={folder / 'ray'}", "--disable-usage-stats", "--block",
    ]  # fmt: skip
    # The local backend's node supervisor: it tells the raylet its agent's port at once
    # and starts a node that fell over before it came up again, which is what makes a
    # node come up on a busy machine (backends/local/node.py).
    node_argv = [sys.executable, "-m", "raylab.backends.local.node", str(NODE_TRIES),
                 str(agents["dashboard-agent-listen-port"]), "--", *argv]  # fmt: skip
    watched = [sys.executable, "-m", "raylab.kernel.joined_node", str(os.getpid()), str(log), "--"]
    supervisor = subprocess.Popen(
        [*watched, *node_argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Its own process group, so that a kernel interrupt (SIGINT to the kernel's group)
        # leaves it be, but the kernel's session: Linux schedules each session as one
        # group (autogroup), and a node in a session of its own answered each zero-copy
        # `ray.get` ~30 % slower than one started by hand (bench_incluster.py).
        process_group=0,
    )
    node = JoinedNode(supervisor, log, ports)
    deadline = time.monotonic() + timeout
    while True:
        text = _read(log)
        if READY_TEXT in text:
            return node
        exited = supervisor.poll() is not None
        if exited or time.monotonic() >= deadline:
            why = (
                _fatal(folder / "ray")
                or _last_error(text)
                or ("`ray start` exited" if exited else f"it did not join within {timeout:.0f} s")
            )
            node.leave()
            raise JoinFailed(
                f"this pod could not join the cluster as a Ray node ({why}); {_hint(why)}"
            )
        time.sleep(POLL_S)


def _hint(why: str) -> str:
    # Ray's node waits a fixed time for its own agents' files: on a starved CPU they miss
    # it, which no policy explains.
    if "Timed out waiting for file" in why:
        return "the node's own agents did not start in time: give the notebook pod more CPU"
    return "check that the NetworkPolicies admit the ports of docs/zero-to-jupyterhub.md"


def _fatal(temp_dir: Path) -> str | None:
    from ..backends.local.backend import fatal_line  # only when joining failed

    return fatal_line(temp_dir)


def _read(log: Path) -> str:
    try:
        return log.read_text(errors="replace")
    except OSError:
        return ""


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln or "failed" in ln]
    line = errors[-1] if errors else ""
    return line if len(line) <= 200 else line[:197] + "..."


def _supervise(kernel: int, log: Path, argv: list[str]) -> int:
    """Run `argv` (`ray start --block`) until it ends, SIGTERM arrives or `kernel` exits;
    then end it (`ray start --block` stops its raylet and agents on SIGTERM)."""
    stop = False

    def _stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with open(log, "wb") as out:
        # A group of its own, still in the kernel's session (see join).
        node = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                                process_group=0)  # fmt: skip
    while node.poll() is None and not stop and os.getppid() == kernel:
        time.sleep(0.5)
    # Its raylet and agents, which must not outlive it (nor this).
    spawned: list[psutil.Process] = []
    with contextlib.suppress(psutil.Error):
        spawned = psutil.Process(node.pid).children(recursive=True)
    if node.poll() is None:
        # The node supervisor and its `ray start` share a group (`ray start --block`
        # stops its raylet and agents on SIGTERM).
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            node.wait(10)
    if node.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)
    _, alive = psutil.wait_procs(spawned, timeout=10)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return node.wait()


if __name__ == "__main__":
    kernel_pid, log_path, _, *command = sys.argv[1:]
    sys.exit(_supervise(int(kernel_pid), Path(log_path), command))
