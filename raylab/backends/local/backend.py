"""Local backend: a Ray cluster as `ray start` processes on this machine.

Each node (head, worker-1, ...) is one `ray start --block` process in a session of its
own, so a kernel's exit or a Jupyter restart does not take it down, and `down` can end
the node with everything it spawned (one signal to the session). The truth lives in a
state folder, one sub-folder per cluster with `cluster.json` and a log per node, so any
process (kernel, CLI, server) sees the same clusters and their live status.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from ... import auth
from ...errors import BackendUnavailable, Conflict, NotFound, SpecError
from ...model import (
    ClusterEnvironment,
    ClusterInfo,
    Endpoints,
    IdleState,
    Phase,
    finite_time,
    suspension_reason,
)
from ...spec import ClusterSpec, parse_quantity
from ..base import ClusterEvent
from .memory import object_store_bytes
from .node import READY_TEXT, RESTART_MARK, node_ref
from .ports import AGENT_PORTS, PortPicker
from .processes import (
    CLUSTER_ENV,
    NODE_ENV,
    NodeProcess,
    alive,
    log_started,
    spawn,
    start_reaper,
    stop_sessions,
)
from .ray_start import quick_ray_start
from .tempdir import is_inside, private_temp_root

log = logging.getLogger(__name__)
STATE_FILE = "cluster.json"
QUOTA_LOCK_TIMEOUT_S = 120.0  # a create starts every node under it: seconds, not minutes
START_TRIES = 3  # attempts per node before it is reported dead (see node.py)
_IP_LINE = re.compile(r"Local node IP: (\S+)")
_SESSION = re.compile(r"(/\S+/session_[^/\s]+)")


def physical_gpu_count() -> int:
    """GPUs this machine really has, as the NVIDIA driver lists them."""
    with contextlib.suppress(OSError):
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    return 0


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
    # "token": every node checks the cluster's token (auth.TOKEN_FILE beside this file);
    # "disabled" for clusters made with auth off, or before raylab had it.
    auth: str = "disabled"
    environment: ClusterEnvironment | None = None
    uid: str = ""  # lasting identity (GPU-hours ledger); older clusters get one on read
    idle: IdleState = field(default_factory=IdleState)  # the culler's (culler/rules.py)
    cell_at: float | None = None  # a connected kernel's last cell (ClusterInfo.cell_at)
    standby_until: float | None = None  # a standby's end, until claimed (raylab/standby)

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
            "auth": self.auth,
            "environment": self.environment.to_json() if self.environment else None,
            "uid": self.uid,
            "idle": self.idle.to_json(),
            "cell_at": self.cell_at,
            "standby_until": self.standby_until,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> _State:
        """Raises ValueError, TypeError or KeyError on a damaged file."""
        state = cls(
            spec=ClusterSpec.from_json(data["spec"]),
            owner=data["owner"],
            created=data["created"],
            ray_version=data["ray_version"],
            python_version=data["python_version"],
            ports=data["ports"],
            nodes=[NodeProcess.from_json(n) for n in data["nodes"]],
            suspended=data.get("suspended", False),
            deleting=data.get("deleting", False),
            logical_gpus=data.get("logical_gpus", False),
            auth=data.get("auth", "disabled"),
            environment=ClusterEnvironment.from_json(data.get("environment")),
            uid=data.get("uid") or f"local-{data['spec']['name']}-{data['created']:.0f}",
            idle=IdleState.from_json(data.get("idle")),
            cell_at=finite_time(data.get("cell_at")),
            standby_until=finite_time(data.get("standby_until")),
        )
        typed = (
            isinstance(state.owner, str)
            and isinstance(state.created, int | float)
            and all(isinstance(v, int) for v in state.ports.values())
            and all(n.well_typed() for n in state.nodes)
        )
        if not typed:
            raise TypeError("owner, created, ports or nodes have the wrong types")
        return state


class LocalBackend:
    name = "local"
    # A node is started again only until it first comes up (node.py); one that
    # exits after that, or never came up in its tries, stays down.
    restarts_nodes = False
    driver_joins = False
    autoscales = False
    may_queue = False
    workers_read_owner_files = True
    # The per-cluster calls' `namespace` is ignored: this machine's clusters have none.

    def __init__(
        self, state_dir: Path, ray_executable: str | None = None, *, token_auth: bool = True
    ) -> None:
        self.state_dir = Path(state_dir)
        # What runs `ray start ARGS`: a given `ray` command (tests give a broken one), or
        # the quick launcher (ray_start.py), or the `ray` command found.
        quick = None if ray_executable else quick_ray_start()
        self.ray_start = quick or [ray_executable or _find_ray(), "start"]
        self._order = "--after" if quick else "--needs"
        self.token_auth = token_auth

    # --- state folder -------------------------------------------------------------

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        """One writer at a time across processes (kernel, CLI, server)."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with FileLock(self.state_dir / ".lock"):
            yield

    @contextlib.contextmanager
    def quota_lock(self, owner: str, *, namespace: str | None = None) -> Iterator[None]:
        """One quota check and create (or scale) at a time per owner, across processes.
        Its own file: a create holds it while it takes the folder's lock inside."""
        self.state_dir.mkdir(parents=True, exist_ok=True)
        key = hashlib.sha256(owner.encode()).hexdigest()[:16]
        try:
            with FileLock(self.state_dir / f".quota-{key}.lock", timeout=QUOTA_LOCK_TIMEOUT_S):
                yield
        except Timeout:
            raise BackendUnavailable(
                f"another request of {owner}'s held the quota check for over "
                f"{QUOTA_LOCK_TIMEOUT_S:.0f} s",
                detail="try again in a moment",
            ) from None

    def _dir(self, name: str) -> Path:
        return self.state_dir / name

    def _read(self, name: str) -> _State | None:
        """The cluster's state; None when there is none, or when its file cannot be
        trusted (logged once, naming the file): unreadable, malformed, or written by
        another OS user, whose pids and paths raylab must never act on. One bad file
        never breaks another cluster's operations."""
        path = self._dir(name) / STATE_FILE
        try:
            with open(path, "rb") as fh:
                owner_uid = os.fstat(fh.fileno()).st_uid
                raw = fh.read(_MAX_STATE_BYTES + 1)
        except FileNotFoundError:
            return None
        except OSError as exc:
            _skip(path, f"cannot be read ({exc.strerror})")
            return None
        if owner_uid != os.getuid():
            _skip(path, f"belongs to uid {owner_uid}, not to this user ({os.getuid()})")
            return None
        if len(raw) > _MAX_STATE_BYTES:
            _skip(path, f"is over {_MAX_STATE_BYTES // 1024} KiB")
            return None
        try:
            state = _State.from_json(json.loads(raw))
            if state.spec.name != name:
                raise ValueError(f"it names cluster {state.spec.name!r}")
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            _skip(path, f"is not a raylab cluster state ({type(exc).__name__}: {exc})")
            return None
        return state

    def _write(self, name: str, state: _State) -> None:
        path = self._dir(name) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=1))
        tmp.replace(path)  # atomic: readers never see half a file

    def _ports(self) -> PortPicker:
        """A picker that avoids every port the clusters of this folder hold (call it under
        the lock, so two creates never choose the same one)."""
        taken: set[int] = set()
        for name in self._names():
            state = self._read(name)
            if state is not None:
                taken.update(state.ports.values())
                for node in state.nodes:
                    taken.update(node.ports.values())
        return PortPicker(taken)

    def _names(self) -> list[str]:
        if not self.state_dir.is_dir():
            return []
        return sorted(p.name for p in self.state_dir.iterdir() if (p / STATE_FILE).is_file())

    # --- Backend interface --------------------------------------------------------

    def create(
        self,
        spec: ClusterSpec,
        owner: str,
        environment: ClusterEnvironment | None = None,
        *,
        standby_until: float | None = None,
    ) -> ClusterInfo:
        from importlib.metadata import version

        with self._lock():
            folder = self._dir(spec.name)
            if (folder / STATE_FILE).exists():
                if self._read(spec.name) is not None:
                    raise Conflict(f"a cluster named {spec.name!r} already exists")
                raise Conflict(
                    f"the name {spec.name!r} is held by a state file raylab cannot use",
                    detail=f"choose another --name, or remove {folder} (the log names "
                    "what is wrong with it)",
                )
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
                auth="token" if self.token_auth else "disabled",
                environment=environment,
                uid=f"local-{secrets.token_hex(8)}",
                standby_until=standby_until,
            )
            self._start_nodes(spec.name, state)
        if standby_until is not None:
            # Its end is kept by a process of its own: a server that dies leaves no
            # standby past its time (standby_reaper.py).
            start_reaper(self.state_dir, spec.name, state.uid)
        return self._info(spec.name, state)

    def claim(
        self, name: str, environment: ClusterEnvironment | None, *, namespace: str | None = None
    ) -> ClusterInfo | None:
        """Make the standby `name` an ordinary cluster, in one step under the folder's
        lock; None when it is no standby (any more), or is stopping."""
        with self._lock():
            state = self._read(name)
            if state is None or state.standby_until is None or state.deleting or state.suspended:
                return None
            state.standby_until = None
            state.idle = IdleState()  # its idle clock starts with its owner
            if environment is not None:
                state.environment = environment
            self._write(name, state)
            return self._info(name, state)

    def retire_standby(self, name: str, *, namespace: str | None = None) -> bool:
        """Delete `name` if it is still an unclaimed standby; False when it is not."""
        return self._delete(name, standby_only=True)

    def get(self, name: str, *, namespace: str | None = None) -> ClusterInfo | None:
        state = self._read(name)
        return None if state is None else self._info(name, state)

    def clusters(self, owner: str | None = None) -> list[ClusterInfo]:
        out = []
        for name in self._names():
            state = self._read(name)
            if state is not None and (owner is None or state.owner == owner):
                out.append(self._info(name, state))
        return out

    def delete(self, name: str, *, namespace: str | None = None) -> None:
        self._delete(name, standby_only=False)

    def _delete(self, name: str, *, standby_only: bool) -> bool:
        with self._lock():
            state = self._read(name) if standby_only else self._require(name)
            if state is None or (standby_only and (state.standby_until is None or state.deleting)):
                return False
            state.deleting = True
            self._write(name, state)
        # Stopping takes seconds: readers see Deleting meanwhile, not a lock.
        stop_sessions(state.nodes, name)
        with self._lock():
            shutil.rmtree(self._dir(name), ignore_errors=True)
        return True

    def scale(self, name: str, workers: int, *, namespace: str | None = None) -> ClusterInfo:
        with self._lock():
            state = self._require(name)
            current = [n for n in state.nodes if n.role == "worker"]
            state.spec = state.spec.with_workers(workers)
            if state.suspended:
                self._write(name, state)
                return self._info(name, state)
            if workers < len(current):
                removed = current[workers:]
                stop_sessions(removed, name)
                state.nodes = [n for n in state.nodes if n not in removed]
            else:
                self._start_workers(name, state, range(len(current) + 1, workers + 1))
            state.logical_gpus = state.spec.gpus > physical_gpu_count()
            self._write(name, state)
            return self._info(name, state)

    def set_environment(
        self, name: str, environment: ClusterEnvironment, *, namespace: str | None = None
    ) -> ClusterInfo:
        with self._lock():
            state = self._require(name)
            state.environment = environment
            self._write(name, state)
            return self._info(name, state)

    def set_suspended(
        self, name: str, suspended: bool, *, namespace: str | None = None
    ) -> ClusterInfo:
        with self._lock():
            state = self._require(name)
            if suspended == state.suspended:
                if state.idle != IdleState():
                    state.idle = IdleState()
                    self._write(name, state)
                return self._info(name, state)
            state.idle = IdleState()  # a user's suspend or resume: no idle reason, fresh clock
            if suspended:
                self._suspend(name, state)
            else:
                self._resume(name, state)
            return self._info(name, state)

    def update_idle(
        self,
        name: str,
        idle: IdleState,
        *,
        expected: IdleState | None = None,
        suspend: bool = False,
        namespace: str | None = None,
    ) -> bool:
        """Store the culler's idle state, if the stored one is still `expected` (None:
        whatever it is); with `suspend`, suspend the cluster in the same step."""
        with self._lock():
            state = self._read(name)
            if state is None or (expected is not None and state.idle != expected):
                return False
            if suspend and state.suspended:
                return False  # suspended meanwhile, by its owner: theirs, not idleness
            state.idle = idle
            if suspend:
                self._suspend(name, state)
            else:
                self._write(name, state)
            return True

    def _suspend(self, name: str, state: _State) -> None:
        # Suspended is written first: read while its processes stop, the cluster must not
        # look like one whose head died (Failed).
        state.suspended = True
        self._write(name, state)
        stop_sessions(state.nodes, name)
        state.nodes = []
        self._write(name, state)

    def mark_cell(self, name: str, at: float, *, namespace: str | None = None) -> None:
        """A kernel connected to the cluster ran a cell at `at` (culler/activity.py)."""
        with self._lock():
            state = self._read(name)
            if state is None or (state.cell_at is not None and state.cell_at >= at):
                return
            state.cell_at = at
            self._write(name, state)

    def _resume(self, name: str, state: _State) -> None:
        state.suspended = False
        self._start_nodes(name, state)

    def logs(self, name: str, tail: int = 200, *, namespace: str | None = None) -> str:
        state = self._require(name)
        head = next((n for n in state.nodes if n.role == "head"), None)
        if head is None or not is_inside(head.log, self._dir(name)):
            return f"{name} has no running head (phase {self._info(name, state).phase})."
        text = _tail(Path(head.log), tail)
        session = _SESSION.search(_read_head(Path(head.log)))
        if session:
            text += f"\n[raylab] Ray's own logs for this cluster: {session.group(1)}/logs\n"
        return text

    def auth_token(self, name: str) -> str | None:
        state = self._require(name)
        if state.auth != "token":
            return None
        return auth.read_token_file(self._token_path(name), name)

    def client_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.client

    def driver_address(self, info: ClusterInfo) -> str | None:
        # Every node runs on this machine, so its workers can fetch this kernel's objects.
        return info.endpoints.gcs

    def dashboard_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.dashboard

    def serve_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.serve

    def metrics_address(self, info: ClusterInfo) -> str | None:
        return info.endpoints.metrics

    lasting_dashboard_address = dashboard_address

    def watch(
        self, stop: threading.Event, on_health: Callable[[str | None], None] | None = None
    ) -> Iterator[ClusterEvent]:
        """Local status comes from process liveness, which cannot be watched: poll it."""
        known: dict[str, ClusterInfo] = {}
        while not stop.is_set():
            current = {c.name: c for c in self.clusters()}
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

    def _token_path(self, name: str) -> Path:
        return self._dir(name) / auth.TOKEN_FILE

    def _auth_env(self, name: str, state: _State) -> dict[str, str]:
        if state.auth != "token":
            return {}
        path = self._token_path(name)
        if not path.is_file():
            # A new cluster, or one whose token was lost: the nodes about to start get a
            # new one (a resume is how a user replaces a lost token).
            auth.write_token_file(path, auth.new_token())
        return auth.node_env(path)

    def _start_nodes(self, name: str, state: _State) -> None:
        """Start the head and the workers (whose supervisors wait for the head to be up)."""
        ports = self._ports()
        # Serve's port too: every cluster on this machine gets its own (serving/defaults.py).
        state.ports = ports.take_many(("gcs", "client", "dashboard", "serve"))
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
        env = self._auth_env(name, state)
        state.nodes = [self._spawn(name, "head", 0, args, env, ports, [])]
        self._start_workers(name, state, range(1, spec.workers + 1), ports)
        self._write(name, state)

    def _start_workers(
        self, name: str, state: _State, indexes: range, ports: PortPicker | None = None
    ) -> None:
        spec = state.spec
        ports = ports or self._ports()
        per_worker = spec.gpus_per_worker
        physical = physical_gpu_count()
        concurrency = str(startup_concurrency(spec.workers))
        for i in indexes:
            env = self._auth_env(name, state)
            devices = range((i - 1) * per_worker, i * per_worker)
            if per_worker and devices.stop <= physical:
                # Each worker node gets its own slice of the real devices.
                env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, devices))
            env[STARTUP_CONCURRENCY_ENV] = concurrency
            args = [
                f"--address=127.0.0.1:{state.ports['gcs']}",
                f"--num-cpus={_cpus(spec.cpus)}",
                f"--num-gpus={per_worker}",
                f"--memory={int(parse_quantity(spec.memory))}",
            ]
            # Workers start once the head is up (see node.py); the launcher waits for it
            # itself, after loading Ray.
            order = [self._order, _ref(state.nodes[0])]
            state.nodes.append(self._spawn(name, "worker", i, args, env, ports, order))

    def _spawn(
        self,
        name: str,
        role: str,
        index: int,
        args: list[str],
        env: dict[str, str],
        picker: PortPicker,
        order: list[str],
    ) -> NodeProcess:
        label = "head" if role == "head" else f"worker-{index}"
        log = self._dir(name) / f"{label}.log"
        ports = picker.take_many(AGENT_PORTS)
        common = [
            "--block",
            "--disable-usage-stats",
            "--log-style=record",
            "--log-color=false",
            f"--object-store-memory={object_store_bytes()}",
            *(f"--{flag}={port}" for flag, port in ports.items()),
        ]
        supervisor = [
            *(sys.executable, "-m", "raylab.backends.local.node", str(START_TRIES)),
            str(ports["dashboard-agent-listen-port"]),
            *order,
            "--",
        ]
        # Every process of the node inherits these: which cluster and which node it is.
        env = {**env, CLUSTER_ENV: name, NODE_ENV: label}
        # Each node gets a temp dir of its own: Ray names a node's sockets by probing for
        # a free name in the session's folder, which races when two nodes of one host
        # start at once ("bind: Address already in use"). A short path keeps the socket
        # paths under the 107-byte limit of Unix sockets.
        temp_dir = private_temp_root() / secrets.token_hex(4)
        common.append(f"--temp-dir={temp_dir}")
        return spawn(
            [*supervisor, *self.ray_start, *args, *common],
            log,
            role,
            index,
            env,
            str(temp_dir),
            ports,
        )

    # --- status -------------------------------------------------------------------

    def _info(self, name: str, state: _State) -> ClusterInfo:
        phase, reason, ready, head_ready = self._status(state)
        if phase in (Phase.FAILED, Phase.DEGRADED):
            # A process seen dead may have been stopped after `state` was read: a suspend
            # or a delete writes itself down before it stops anything, so a second read
            # tells a stop from a crash (read without the lock, a status must not flash
            # Failed while a culler suspends).
            fresh = self._read(name)
            if fresh is not None and (fresh.suspended or fresh.deleting):
                state = fresh
                phase, reason, ready, head_ready = self._status(state)
        head = next((n for n in state.nodes if n.role == "head"), None)
        host = _node_ip(Path(head.log)) if head else None
        endpoints = Endpoints()
        if head and host and phase not in (Phase.FAILED, Phase.SUSPENDED):
            serve, metrics = state.ports.get("serve"), head.ports.get("metrics-export-port")
            endpoints = Endpoints(
                client=f"ray://{host}:{state.ports['client']}",
                dashboard=f"http://127.0.0.1:{state.ports['dashboard']}",
                gcs=f"{host}:{state.ports['gcs']}",
                serve=f"http://127.0.0.1:{serve}" if serve else None,
                metrics=f"http://127.0.0.1:{metrics}" if metrics else None,
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
            environment=state.environment,
            uid=state.uid,
            idle=state.idle,
            cell_at=state.cell_at,
            standby_until=state.standby_until,
        )

    def _status(self, state: _State) -> tuple[Phase, str, int, bool]:
        """Phase, reason, ready workers, and whether the head is up."""
        if state.deleting:
            return Phase.DELETING, "stopping Ray processes", 0, False
        if state.suspended:
            why = suspension_reason(state.idle) or "suspended: no Ray processes running"
            return Phase.SUSPENDED, why, 0, False
        head = next((n for n in state.nodes if n.role == "head"), None)
        if head is None:
            return Phase.FAILED, "the head was never started", 0, False
        workers = [n for n in state.nodes if n.role == "worker"]
        if not alive(head):
            return Phase.FAILED, f"head process exited: {_node_error(head)}", 0, False
        if not log_started(head, READY_TEXT):
            return Phase.STARTING, "starting the head", 0, False
        ready, dead = 0, []
        for w in workers:
            if not alive(w):
                dead.append(w)
            elif log_started(w, READY_TEXT):
                ready += 1
        if dead:
            which = ", ".join(f"worker-{w.index}" for w in dead)
            reason = f"{which} exited: {_node_error(dead[0])}"
            return Phase.DEGRADED, reason, ready, True
        if ready < state.spec.workers:
            return Phase.STARTING, "waiting for workers", ready, True
        return Phase.READY, "", ready, True


_MAX_STATE_BYTES = 1024 * 1024  # a real one is a few KiB
_skipped: set[tuple[str, str]] = set()


def _skip(path: Path, why: str) -> None:
    """Warn once per file and reason: a watch reads every file twice a second."""
    if (str(path), why) not in _skipped:
        _skipped.add((str(path), why))
        log.warning("raylab: skipping %s: it %s", path, why)


def _ref(node: NodeProcess) -> str:
    return node_ref(node.pid, node.started, node.log)


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


# Ray's own setting (ray_config_def.h), read by each raylet at its start.
STARTUP_CONCURRENCY_ENV = "RAY_worker_maximum_startup_concurrency"


def startup_concurrency(worker_nodes: int) -> int:
    """How many worker processes each worker node may start at once.

    Ray lets a node start as many at once as its machine has cores (`min(cores, CPUs)`),
    a rule made for one node per machine. A local cluster's nodes share this machine, so
    they share its cores: with Ray's rule, two 8-CPU workers on 2 cores started four
    Python processes at once for a burst of small tasks, and the one worker already
    running them slowed to ~30 tasks a second (docs/benchmarks.md, `first_task`)."""
    return max(1, (os.cpu_count() or 1) // max(1, worker_nodes))


def _cpus(quantity: str) -> int:
    """Ray counts whole CPUs; a Kubernetes quantity such as 500m rounds up to 1."""
    amount = parse_quantity(quantity)
    whole = int(amount) if amount == int(amount) else int(amount) + 1
    if whole < 1:
        raise SpecError("cpus", "the local backend needs at least one CPU per worker")
    return whole


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


def _node_error(node: NodeProcess) -> str:
    """The most telling line about why a node died: the fatal error of one of its Ray
    processes (`ray start` itself only says "timed out during startup" when its raylet
    aborted), else the error its own log shows, else that it was stopped from outside."""
    line = _fatal_line(node) or _log_error(Path(node.log))
    return line if len(line) <= 200 else line[:197] + "..."


def _log_error(log: Path) -> str:
    """The first error of the node's last attempt (what follows it is mostly Ray's
    advice on where to look), else its last exception, else that it had none."""
    text = _tail(log, 200).rpartition(RESTART_MARK)[2]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    errors = [ln for ln in lines if " ERROR " in ln or "\tERROR " in ln]
    if errors:
        return errors[0]
    raised = [ln for ln in lines if "Error" in ln or "Exception" in ln]
    if raised:
        return raised[-1]
    # Nothing went wrong inside: the process was stopped from outside (a signal, the
    # machine's out-of-memory killer), and its last line would only mislead.
    return "it stopped with no error in its log (killed from outside?)"


# A C++ Ray process's fatal log line, e.g. "[2026-01-01 10:00:00,000 C 12 12] (raylet)
# node_manager.cc:3588: An unexpected system state ... Check failed: x.has_value() Why".
_FATAL = re.compile(r"^\[[^\]]* [FC] \d+ \d+\] (?:\(\w+\) )?(?:\S+:\d+: *)?(.*\S)")
_CHECK = re.compile(r"Check failed: (?:\S+\(\) )?(.*)")
_FATAL_LOGS = ("raylet.out", "raylet.err", "gcs_server.out", "gcs_server.err")


def _fatal_line(node: NodeProcess) -> str | None:
    return fatal_line(Path(node.temp_dir)) if node.temp_dir else None


def fatal_line(temp_dir: Path) -> str | None:
    """The last fatal line in the Ray logs of the latest session under `temp_dir` (a
    node's `--temp-dir`), if any."""
    logs = temp_dir / "session_latest" / "logs"
    found = None
    for name in _FATAL_LOGS:
        for line in _tail(logs / name, 400).splitlines():
            match = _FATAL.match(line)
            if match:
                why = match.group(1)
                check = _CHECK.search(why)  # Ray's "report a bug" preamble says nothing
                found = f"{name.split('.')[0]}: {check.group(1) if check else why}"
    return found


def _changed(a: ClusterInfo, b: ClusterInfo) -> bool:
    fields = ("phase", "reason", "workers_ready", "workers_desired", "endpoints", "idle",
              "environment", "standby_until")  # fmt: skip
    return any(getattr(a, f) != getattr(b, f) for f in fields)
