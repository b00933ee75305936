"""Local backend: a Ray cluster as `ray start` processes on this machine.

Each node (head, worker-1, ...) is one `ray start --block` process in a session of its
own, so a kernel's exit or a Jupyter restart does not take it down, and `down` can end
the node with everything it spawned (one signal to the session). The truth lives in a
state folder, one sub-folder per cluster with `cluster.json` and a log per node, so any
process (kernel, CLI, server) sees the same clusters and their live status.
"""

from __future__ import annotations

import builtins
import contextlib
import fcntl
import json
import os
import re
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..errors import BackendUnavailable, Conflict, NotFound, SpecError
from ..model import ClusterInfo, Endpoints, Phase
from ..spec import ClusterSpec, parse_quantity
from .base import ClusterEvent
from .local_processes import NodeProcess, alive, log_started, spawn, stop_sessions

STATE_FILE = "cluster.json"
CLUSTER_ENV = "RAYLAB_CLUSTER"
START_TRIES = 3  # attempts per node before it is reported dead (see local_node.py)
NODE_READY_TEXT = "Ray runtime started"
_IP_LINE = re.compile(r"Local node IP: (\S+)")
_SESSION = re.compile(r"(/\S+/session_[^/\s]+)")


def physical_gpu_count() -> int:
    """GPUs this machine really has, as the NVIDIA driver lists them."""
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class _State:
    """What `cluster.json` holds."""

    spec: ClusterSpec
    owner: str
    created: float
    ray_version: str
    python_version: str
    ports: dict[str, int]
    nodes: list[NodeProcess]
    suspended: bool = False
    deleting: bool = False
    logical_gpus: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "spec": self.spec.to_json(),
            "owner": self.owner,
            "created": self.created,
            "ray_version": self.ray_version,
            "python_version": self.python_version,
            "ports": self.ports,
            "nodes": [n.to_json() for n in self.nodes],
            "suspended": self.suspended,
            "deleting": self.deleting,
            "logical_gpus": self.logical_gpus,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _State:
        return cls(
            spec=ClusterSpec(**data["spec"]),
            owner=data["owner"],
            created=data["created"],
            ray_version=data["ray_version"],
            python_version=data["python_version"],
            ports=data["ports"],
            nodes=[NodeProcess.from_json(n) for n in data["nodes"]],
            suspended=data.get("suspended", False),
            deleting=data.get("deleting", False),
            logical_gpus=data.get("logical_gpus", False),
        )


class LocalBackend:
    name = "local"

    def __init__(self, state_dir: Path, ray_executable: str | None = None) -> None:
        self.state_dir = Path(state_dir)
        self.ray = ray_executable or _find_ray()

    # --- state folder -------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """One writer at a time across processes (kernel, CLI, server)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with open(self.state_dir / ".lock", "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _dir(self, name: str) -> Path:
        return self.state_dir / name

    def _read(self, name: str) -> _State | None:
        try:
            data = json.loads((self._dir(name) / STATE_FILE).read_text())
        except (OSError, ValueError):
            return None
        return _State.from_json(data)

    def _write(self, name: str, state: _State) -> None:
        path = self._dir(name) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=1))
        tmp.replace(path)  # atomic: readers never see half a file

    def _names(self) -> list[str]:
        if not self.state_dir.is_dir():
            return []
        return sorted(p.name for p in self.state_dir.iterdir() if (p / STATE_FILE).is_file())

    # --- Backend interface --------------------------------------------------------

    def create(self, spec: ClusterSpec, owner: str) -> ClusterInfo:
        from importlib.metadata import version

        with self._lock():
            if self._read(spec.name) is not None:
                raise Conflict(f"a cluster named {spec.name!r} already exists")
            folder = self._dir(spec.name)
            shutil.rmtree(folder, ignore_errors=True)  # leftovers of a failed create
            folder.mkdir(parents=True)
            state = _State(
                spec=spec,
                owner=owner,
                created=time.time(),
                ray_version=version("ray"),
                python_version=f"{sys.version_info.major}.{sys.version_info.minor}",
                ports={},
                nodes=[],
                logical_gpus=spec.gpus > physical_gpu_count(),
            )
            self._start_nodes(spec.name, state)
        return self._info(spec.name, state)

    def get(self, name: str) -> ClusterInfo | None:
        state = self._read(name)
        return None if state is None else self._info(name, state)

    def list(self, owner: str | None = None) -> list[ClusterInfo]:
        out = []
        for name in self._names():
            state = self._read(name)
            if state is not None and (owner is None or state.owner == owner):
                out.append(self._info(name, state))
        return out

    def delete(self, name: str) -> None:
        with self._lock():
            state = self._require(name)
            state.deleting = True
            self._write(name, state)
        # Stopping takes seconds: readers see Deleting meanwhile, not a lock.
        stop_sessions(state.nodes)
        with self._lock():
            shutil.rmtree(self._dir(name), ignore_errors=True)

    def scale(self, name: str, workers: int) -> ClusterInfo:
        with self._lock():
            state = self._require(name)
            current = [n for n in state.nodes if n.role == "worker"]
            state.spec = state.spec.with_workers(workers)
            if state.suspended:
                self._write(name, state)
                return self._info(name, state)
            if workers < len(current):
                removed = current[workers:]
                stop_sessions(removed)
                state.nodes = [n for n in state.nodes if n not in removed]
            else:
                self._start_workers(name, state, range(len(current) + 1, workers + 1))
            state.logical_gpus = state.spec.gpus > physical_gpu_count()
            self._write(name, state)
            return self._info(name, state)

    def set_suspended(self, name: str, suspended: bool) -> ClusterInfo:
        with self._lock():
            state = self._require(name)
            if suspended == state.suspended:
                return self._info(name, state)
            if suspended:
                stop_sessions(state.nodes)
                state.nodes = []
                state.suspended = True
                self._write(name, state)
            else:
                state.suspended = False
                self._start_nodes(name, state)
            return self._info(name, state)

    def logs(self, name: str, tail: int = 200) -> str:
        state = self._require(name)
        head = next((n for n in state.nodes if n.role == "head"), None)
        if head is None:
            return f"{name} has no running head (phase {self._info(name, state).phase})."
        text = _tail(Path(head.log), tail)
        session = _SESSION.search(_read_head(Path(head.log)))
        if session:
            text += f"\n[raylab] Ray's own logs for this cluster: {session.group(1)}/logs\n"
        return text

    def client_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.client

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.dashboard

    def watch(
        self, stop: threading.Event, on_health: Callable[[str | None], None] | None = None
    ) -> Iterator[ClusterEvent]:
        """Local status comes from process liveness, which cannot be watched: poll it."""
        known: dict[str, ClusterInfo] = {}
        while not stop.is_set():
            current = {c.name: c for c in self.list()}
            for name, info in current.items():
                before = known.get(name)
                if before is None:
                    yield ClusterEvent("ADDED", info)
                elif _changed(before, info):
                    yield ClusterEvent("MODIFIED", info)
            for name in known.keys() - current.keys():
                yield ClusterEvent("DELETED", known[name])
            known = current
            stop.wait(0.5)

    # --- processes ----------------------------------------------------------------

    def _require(self, name: str) -> _State:
        state = self._read(name)
        if state is None:
            raise NotFound(f"no cluster named {name!r}")
        return state

    def _start_nodes(self, name: str, state: _State) -> None:
        """Start the head, and the workers as soon as the head's GCS listens."""
        state.ports = {"gcs": _free_port(), "client": _free_port(), "dashboard": _free_port()}
        spec = state.spec
        head_cpus = _cpus(spec.cpus) if spec.workers == 0 else 0
        args = [
            "--head",
            f"--port={state.ports['gcs']}",
            f"--ray-client-server-port={state.ports['client']}",
            "--include-dashboard=true",
            # The dashboard can submit jobs: keep it off the network.
            "--dashboard-host=127.0.0.1",
            f"--dashboard-port={state.ports['dashboard']}",
            f"--num-cpus={head_cpus}",
            "--num-gpus=0",
        ]
        head = self._spawn(name, "head", 0, args, env={})
        state.nodes = [head]
        self._write(name, state)
        if not _wait_port(state.ports["gcs"], head, timeout=60.0):
            stop_sessions(state.nodes)
            state.nodes = []
            self._write(name, state)
            raise BackendUnavailable(
                "the Ray head did not start",
                detail=_tail(Path(head.log), 20),
            )
        self._start_workers(name, state, range(1, spec.workers + 1))
        self._write(name, state)

    def _start_workers(self, name: str, state: _State, indexes: range) -> None:
        spec = state.spec
        per_worker = spec.gpus_per_worker
        physical = physical_gpu_count()
        for i in indexes:
            env: dict[str, str] = {}
            devices = range((i - 1) * per_worker, i * per_worker)
            if per_worker and devices.stop <= physical:
                # Each worker node gets its own slice of the real devices.
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
            args = [
                f"--address=127.0.0.1:{state.ports['gcs']}",
                f"--num-cpus={_cpus(spec.cpus)}",
                f"--num-gpus={per_worker}",
                f"--memory={int(parse_quantity(spec.memory))}",
            ]
            state.nodes.append(self._spawn(name, "worker", i, args, env))

    def _spawn(
        self, name: str, role: str, index: int, args: builtins.list[str], env: dict[str, str]
    ) -> NodeProcess:
        label = "head" if role == "head" else f"worker-{index}"
        log = self._dir(name) / f"{label}.log"
        common = [
            "--block",
            "--disable-usage-stats",
            "--log-style=record",
            "--log-color=false",
            # Several nodes share this host: let each pick free agent ports.
            "--dashboard-agent-listen-port=0",
            f"--object-store-memory={_object_store_bytes()}",
        ]
        supervisor = [sys.executable, "-m", "raylab.backends.local_node", str(START_TRIES), "--"]
        # Every process of the node inherits this: it tells which cluster a process is.
        env = {**env, CLUSTER_ENV: name}
        # Each node gets a temp dir of its own: Ray names a node's sockets by probing for
        # a free name in the session's folder, which races when two nodes of one host
        # start at once ("bind: Address already in use"). A short path keeps the socket
        # paths under the 107-byte limit of Unix sockets.
        temp_dir = Path(tempfile.gettempdir()) / f"raylab-{os.getuid()}" / secrets.token_hex(4)
        common.append(f"--temp-dir={temp_dir}")
        return spawn(
            [*supervisor, self.ray, "start", *args, *common], log, role, index, env, str(temp_dir)
        )

    # --- status -------------------------------------------------------------------

    def _info(self, name: str, state: _State) -> ClusterInfo:
        phase, reason, ready, head_ready = self._status(state)
        head = next((n for n in state.nodes if n.role == "head"), None)
        host = _node_ip(Path(head.log)) if head else None
        endpoints = Endpoints()
        if head and host and phase not in (Phase.FAILED, Phase.SUSPENDED):
            endpoints = Endpoints(
                client=f"ray://{host}:{state.ports['client']}",
                dashboard=f"http://127.0.0.1:{state.ports['dashboard']}",
            )
        return ClusterInfo(
            name=name,
            owner=state.owner,
            backend=self.name,
            phase=phase,
            reason=reason,
            head_ready=head_ready,
            spec=state.spec,
            workers_ready=ready,
            workers_desired=state.spec.workers,
            created=state.created,
            endpoints=endpoints,
            ray_version=state.ray_version,
            python_version=state.python_version,
            logical_gpus=state.logical_gpus,
        )

    def _status(self, state: _State) -> tuple[Phase, str, int, bool]:
        """Phase, reason, ready workers, and whether the head is up."""
        if state.deleting:
            return Phase.DELETING, "stopping Ray processes", 0, False
        if state.suspended:
            return Phase.SUSPENDED, "suspended: no Ray processes running", 0, False
        head = next((n for n in state.nodes if n.role == "head"), None)
        if head is None:
            return Phase.FAILED, "the head was never started", 0, False
        workers = [n for n in state.nodes if n.role == "worker"]
        if not alive(head):
            return Phase.FAILED, f"head process exited: {_last_line(Path(head.log))}", 0, False
        if not log_started(head, NODE_READY_TEXT):
            return Phase.STARTING, "starting the head", 0, False
        ready, dead = 0, []
        for w in workers:
            if not alive(w):
                dead.append(w)
            elif log_started(w, NODE_READY_TEXT):
                ready += 1
        if dead:
            which = ", ".join(f"worker-{w.index}" for w in dead)
            reason = f"{which} exited: {_last_line(Path(dead[0].log))}"
            return Phase.DEGRADED, reason, ready, True
        if ready < state.spec.workers:
            return Phase.STARTING, "waiting for workers", ready, True
        return Phase.READY, "", ready, True


def _find_ray() -> str:
    beside = Path(sys.executable).with_name("ray")
    if beside.exists():
        return str(beside)
    found = shutil.which("ray")
    if not found:
        raise BackendUnavailable(
            "the `ray` command is not installed in this environment",
            detail="pip install 'ray[client,default]' in the kernel's environment",
        )
    return found


def _cpus(quantity: str) -> int:
    """Ray counts whole CPUs; a Kubernetes quantity such as 500m rounds up to 1."""
    amount = parse_quantity(quantity)
    whole = int(amount) if amount == int(amount) else int(amount) + 1
    if whole < 1:
        raise SpecError("cpus", "the local backend needs at least one CPU per worker")
    return whole


def _object_store_bytes() -> int:
    # Ray's default (30% of RAM per node) would promise the same memory to every node on
    # this host; share it instead, within Ray's 75 MiB minimum.
    total = psutil.virtual_memory().total
    return max(128 * 2**20, int(total * 0.3 / 4))


def _wait_port(port: int, head: NodeProcess, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return True
        if not alive(head):
            return False
        time.sleep(0.1)
    return False


def _read_head(log: Path, limit: int = 65536) -> str:
    try:
        with open(log, errors="replace") as fh:
            return fh.read(limit)
    except OSError:
        return ""


def _node_ip(log: Path) -> str | None:
    match = _IP_LINE.search(_read_head(log))
    return match.group(1) if match else None


def _tail(log: Path, lines: int) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 256 * 1024))
            text = fh.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:]) + "\n"


def _last_line(log: Path) -> str:
    """The most telling line of a dead node's log: its last error, else its last line."""
    lines = [ln.strip() for ln in _tail(log, 200).splitlines() if ln.strip()]
    errors = [ln for ln in lines if "ERROR" in ln or "Error" in ln]
    line = (errors or lines or ["no output"])[-1]
    return line if len(line) <= 200 else line[:197] + "..."


def _changed(a: ClusterInfo, b: ClusterInfo) -> bool:
    return (a.phase, a.reason, a.workers_ready, a.workers_desired, a.endpoints) != (
        b.phase,
        b.reason,
        b.workers_ready,
        b.workers_desired,
        b.endpoints,
    )
