"""Connect this kernel to a cluster, checking versions first.

Where the kernel can reach the cluster's GCS and its nodes can reach the kernel (the
local backend: the same machine), the kernel becomes a real Ray driver
(`ray.init("HOST:PORT")`): Ray Data, Train and Tune work, and calls and objects cost what
they cost in any Ray script. Elsewhere (a laptop outside Kubernetes) it goes through Ray
Client, which Ray keeps for that case but has frozen: every call is two gRPC hops, objects
move in 5 MiB chunks, and Ray Data's executor needs a core worker it does not have.

Ray refuses a kernel whose Ray version or Python minor differs from the cluster's, with
an error that does not say what to do; we compare before connecting.
"""

from __future__ import annotations

import atexit
import contextlib
import copy
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .. import auth
from ..errors import BackendUnavailable
from ..model import ClusterInfo
from ..serving import defaults as serve_defaults
from ..sync.errors import RuntimeEnvFailed, runtime_env_failure
from ..versions import check_versions, running_versions
from . import driver_watch, joined_node, live_code, warm_workers

DRIVER, CLIENT = "driver", "client"
# How long a direct driver waits for the cluster to make its pip environment (Ray Client
# waits for it inside ray.init; a driver finds out at its first task: we ask at once).
ENV_READY_TIMEOUT_S = 900.0
# Ray ends a driver's process when its GCS has been gone this long (60 s by default): a
# kernel would die with its variables. driver_watch.py notices the loss first instead.
DRIVER_GCS_TIMEOUT_ENV = "RAY_gcs_rpc_server_reconnect_timeout_s"
DRIVER_GCS_TIMEOUT_S = 7 * 24 * 3600
# How long a joined node's first task may take to read an object of this kernel's: no
# answer means the cluster's pods cannot reach this pod (a NetworkPolicy).
REACH_BACK_TIMEOUT_S = 60.0
REACH_BACK_BYTES = 1024 * 1024  # above Ray's 100 KiB inline limit: fetched, not inlined


@dataclass
class _Connection:
    cluster: str
    address: str
    context: Any
    environment: str = ""  # fingerprint of the runtime_env it was made with
    mode: str = CLIENT  # DRIVER: a direct Ray driver; CLIENT: through Ray Client
    watch: driver_watch.Watch | None = None  # a driver's: notices the head going away
    node: joined_node.JoinedNode | None = None  # a driver's own node (joined_node.py)
    requested: str = ""  # the address asked for (a driver's, even if it fell back)
    why_client: str = ""  # why Ray Client when a driver was asked for
    # What it was made with, before `ray.init` swapped its folders for uploads: a job
    # submitted from this kernel ships the same (jobs/).
    runtime_env: dict[str, Any] | None = None


_current: _Connection | None = None


def connected_cluster() -> str | None:
    return _current.cluster if _current else None


def connected_address() -> str | None:
    """The address in use: the GCS's as a driver, Ray Client's otherwise (from outside
    Kubernetes, a local port-forward)."""
    return _current.address if _current else None


def connected_mode() -> str | None:
    """DRIVER or CLIENT (None: not connected)."""
    return _current.mode if _current else None


def connected_runtime_env() -> dict[str, Any] | None:
    """A copy of the runtime env this kernel's connection was made with (None: none)."""
    return copy.deepcopy(_current.runtime_env) if _current else None


def why_client() -> str:
    """Why this kernel uses Ray Client where it could have been a driver ("" if not so)."""
    return _current.why_client if _current else ""


def connect(
    info: ClusterInfo,
    timeout: float = 60.0,
    address: str | None = None,
    token: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    environment: str = "",
    dashboard: str | None = None,
    driver: str | None = None,
    join: bool = False,
    then: Callable[[], None] | None = None,
) -> None:
    """Attach this process to the cluster; a no-op when already attached to it with the
    same environment.

    `driver`: the GCS address (HOST:PORT) where this process can be a direct Ray driver
    (None: only Ray Client can reach the cluster from here); `join`: this process first
    joins the cluster as a node of its own (joined_node.py), and falls back to Ray Client,
    saying why, when it cannot.
    `address` overrides the cluster's own client endpoint (KubeRay from outside
    Kubernetes: a local port-forward); `token` is the cluster's Ray token (None for a
    cluster made with token auth off). `runtime_env` is Ray's (built by runtime_env.py)
    and `environment` its fingerprint, which changes when anything it ships changes.
    `dashboard` is where to read the head's own versions before Ray Client tries (and
    fails less clearly). `then` runs once connected, before any work is sent (it puts
    what the workers read as they start: sync/kv_values.py); if it fails, so does this."""
    client = address or info.endpoints.client
    requested = driver or client
    if not requested:
        raise BackendUnavailable(
            f"cluster {info.name!r} has no Ray Client endpoint yet (phase {info.phase})",
            detail=f"`%raycluster status {info.name}` shows why",
        )
    if (
        _current
        and _current.cluster == info.name
        and _current.requested == requested
        and _current.environment == environment
        and _alive(_current.mode)
    ):
        return
    check_versions(info, running_versions(dashboard or info.endpoints.dashboard, token))
    disconnect()
    attach = _Attach(info, token, runtime_env, environment, timeout, then)
    if driver is None:
        attach.run(CLIENT, requested)
        return
    try:
        attach.run(DRIVER, driver, join)
    except joined_node.JoinFailed as exc:
        disconnect()
        if not client:
            raise BackendUnavailable(
                f"cannot drive cluster {info.name!r} from here: {exc.reason}",
                detail="and it has no Ray Client endpoint to fall back on",
            ) from None
        attach.run(CLIENT, client)
        assert _current is not None
        _current.why_client = exc.reason
    assert _current is not None
    _current.requested = requested


@dataclass
class _Attach:
    """One way of attaching (as a driver, through Ray Client), tried in turn."""

    info: ClusterInfo
    token: str | None
    runtime_env: dict[str, Any] | None
    environment: str
    timeout: float
    then: Callable[[], None] | None

    def run(self, mode: str, address: str, join: bool = False) -> None:
        global _current
        # A copy each try, and the folder read first: ray.init replaces the folder in
        # `runtime_env` with its upload's URI.
        info, runtime_env = self.info, copy.deepcopy(self.runtime_env)
        auth.use_token(self.token)
        folder = str((runtime_env or {}).get("working_dir") or os.getcwd())
        node = joined_node.join(address) if join else None
        if mode == DRIVER:
            os.environ.setdefault(DRIVER_GCS_TIMEOUT_ENV, str(DRIVER_GCS_TIMEOUT_S))
        try:
            context = _init(info, address, mode, runtime_env, self.timeout)
        except BaseException:
            if node is not None:
                node.leave()
            raise
        _current = _Connection(info.name, address, context, self.environment, mode, node=node,
                               runtime_env=copy.deepcopy(self.runtime_env))  # fmt: skip
        _auto_init(True)
        serve_defaults.use(info.endpoints.serve)  # `serve.run` at this cluster's own port
        if mode == DRIVER:
            _current.watch = driver_watch.Watch(info.name, address, _gcs_probe)
            _current.watch.start()
        live_code.follow(folder)
        if self.then is not None:
            try:
                self.then()
            except BaseException:
                disconnect()  # workers would start without what `then` gives them
                raise
        pip = bool(runtime_env and runtime_env.get("pip"))
        if mode == DRIVER and (pip or node is not None):
            _first_task(info, pip, reach_back=node is not None)
        if mode == DRIVER:
            # Drivers only: a Ray Client kernel's calls from a second thread would share
            # the one channel with the user's.
            warm_workers.start(info.spec.workers, _warm_limit(info))


def load_ray_early() -> None:
    """Import Ray in the background while a cluster starts, for the connect that follows:
    the import takes ~0.6 s of CPU that a cold `up` otherwise spent after the head was up,
    with the workers starting beside it; the wait before it leaves a core idle."""
    if "ray" not in sys.modules:
        threading.Thread(target=_import_ray, name="raylab-load-ray", daemon=True).start()


def _import_ray() -> None:
    with contextlib.suppress(Exception):  # the connect imports it again, and says why
        import ray  # noqa: F401


def _warm_limit(info: ClusterInfo) -> int:
    """How many workers the warm-up may start: a local cluster's nodes share this machine
    (their CPUs are declared, not owned), so no more than it has cores."""
    return (os.cpu_count() or 1) if info.backend == "local" else warm_workers.MAX_IN_ALL


def _init(
    info: ClusterInfo, address: str, mode: str, runtime_env: dict[str, Any] | None,
    timeout: float,
) -> Any:  # fmt: skip
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            with _quiet_thread_warning():
                return ray.init(
                    address,
                    logging_level=logging.WARNING,
                    log_to_driver=True,
                    runtime_env=runtime_env or None,
                )
        except ConnectionError as exc:
            failure = runtime_env_failure(str(exc))
            if failure is not None:  # retrying would fail the same way, minutes later
                auth.forget_token()
                raise _env_failed(info, failure) from None
            # The client server can take a moment after the head reports ready.
            if time.monotonic() >= deadline:
                auth.forget_token()
                what = "the GCS" if mode == DRIVER else "Ray Client"
                raise BackendUnavailable(
                    f"cannot reach {what} of cluster {info.name!r} at {address}: {exc}",
                    detail=f"`%raycluster status {info.name}` and `%raycluster logs "
                    f"{info.name}` show the cluster's state",
                ) from None
            time.sleep(0.5)


def _env_failed(info: ClusterInfo, failure: str) -> RuntimeEnvFailed:
    return RuntimeEnvFailed(
        f"cluster {info.name!r} could not set up this kernel's environment: {failure}",
        detail="fix the package (--pip, --requirements) or leave it out; "
        "this kernel is not connected",
    )


def _first_task(info: ClusterInfo, pip: bool, reach_back: bool) -> None:
    """One task before the user's, on the head node.

    With pip packages: the cluster makes the job's environment now, as Ray Client does on
    connect, so a package that cannot install is this connect's error, not the first
    task's. From a joined node (`reach_back`): the task reads an object of this kernel's,
    which the head must fetch from this pod, so a pod the cluster cannot reach (a
    NetworkPolicy) is found now (JoinFailed) rather than as a hang later. The task asks for
    no CPU, so a busy cluster still runs it; it is pinned to the head, where a task that
    asks for nothing would otherwise start on this kernel's own node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote(num_cpus=0)
    def first(data: Any) -> int:
        return len(data or b"")

    nodes = ray.nodes()  # type: ignore[no-untyped-call]
    head = next(
        n["NodeID"] for n in nodes if n["Alive"] and warm_workers.HEAD_RESOURCE in n["Resources"]
    )
    payload = ray.put(b"r" * REACH_BACK_BYTES) if reach_back else None
    wait = ENV_READY_TIMEOUT_S if pip else REACH_BACK_TIMEOUT_S
    strategy = NodeAffinitySchedulingStrategy(head, soft=False)
    try:
        ray.get(first.options(scheduling_strategy=strategy).remote(payload), timeout=wait)
    except ray.exceptions.RuntimeEnvSetupError as exc:
        disconnect()
        raise _env_failed(info, runtime_env_failure(str(exc)) or str(exc)) from None
    except ray.exceptions.GetTimeoutError:
        if not reach_back:
            raise
        raise joined_node.JoinFailed(
            f"the cluster's pods did not reach this pod's Ray node within {wait:.0f} s "
            "(its ports of docs/zero-to-jupyterhub.md must admit them)"
        ) from None


def _alive(mode: str) -> bool:
    if mode == DRIVER:
        return _driver_alive()
    return _client_alive()


def _driver_alive() -> bool:
    """The GCS still answers this driver. After a head went (a resume, a restart) calls
    would wait for it, so connecting again must not be a no-op."""
    try:
        import ray

        if not ray.is_initialized():
            return False
        _gcs_probe(timeout=5)
        return True
    except Exception:  # unreachable, or Ray's private state differs: not alive
        return False


def _gcs_probe(timeout: float = driver_watch.PROBE_EVERY_S) -> None:
    """Raises unless this driver's GCS answers within `timeout` seconds."""
    import ray

    gcs: Any = getattr(ray._private.worker.global_worker, "gcs_client")  # noqa: B009
    gcs.internal_kv_get(b"raylab-probe", None, timeout=timeout)


def report_lost() -> driver_watch.Lost | None:
    """If the head of the cluster this kernel drives went away: disconnect (in the calling
    thread, which must be the main one) and return what to tell the user, once."""
    lost = driver_watch.take_lost()
    if lost is None or _current is None or _current.cluster != lost.cluster:
        return None
    disconnect()
    _auto_init(False)  # a ray.get now must not quietly start a Ray of its own
    return lost


def _auto_init(enabled: bool) -> None:
    """Ray's own `ray.init()` on the first call of an unconnected process: off once a
    cluster was lost (the user meant that cluster), back on with the next connect."""
    with contextlib.suppress(Exception):  # Ray's private module may differ
        from ray._private import auto_init_hook

        if enabled:
            enabled = os.environ.get("RAY_ENABLE_AUTO_CONNECT", "") != "0"
        auto_init_hook.enable_auto_connect = enabled


def _client_alive() -> bool:
    """Ray Client's connection is still up. After its server went (the head pod was
    replaced: a resume, a restart) the data channel is shut down while
    ray.is_initialized() still says yes, so connecting again must not be a no-op."""
    try:
        from ray.util import client

        client_ray: Any = client.ray  # untyped
        worker = client_ray.get_context().client_worker
        data = getattr(worker, "data_client", None)
        if not client_ray.is_connected() or getattr(data, "_in_shutdown", False):
            return False
        # Within the client's reconnect grace period the flags above still look fine
        # though the channel is closed: ask the server.
        return bool(worker.ping_server(timeout=5))
    except Exception:  # a closed channel raises; Ray's private state may differ: not alive
        return False


def _not_the_sigterm_warning(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("SIGTERM handler is not set")


# The Ray Client server makes the same warning on its side (it too calls `ray.init` off
# its main thread) and streams it to this process's log, after `ray.init` has returned.
logging.getLogger("ray.util.client.logsclient").addFilter(_not_the_sigterm_warning)


@contextmanager
def _quiet_thread_warning() -> Iterator[None]:
    """ipykernel 7 runs cells off the main thread, and `ray.init` then warns that it cannot
    set a SIGTERM handler; harmless for a Ray Client driver, and confusing in red."""
    logger = logging.getLogger("ray._private.worker")
    logger.addFilter(_not_the_sigterm_warning)
    try:
        yield
    finally:
        logger.removeFilter(_not_the_sigterm_warning)


def disconnect() -> str | None:
    """Detach; returns the name of the cluster we were attached to, if any."""
    global _current
    was = _current
    _current = None
    if was is not None and was.watch is not None:
        was.watch.stop()
    live_code.stop()
    warm_workers.stop()  # before ray.shutdown: a Ray call after it would end this process
    serve_defaults.use(None)
    serve_context = sys.modules.get("ray.serve.context")
    if serve_context is not None:
        # Serve keeps its client of the last cluster's controller: not the next one's.
        serve_context._set_global_client(None)
    if "ray" in sys.modules:
        import ray

        try:
            if ray.is_initialized():  # itself a call to the server, in client mode
                ray.shutdown()
        except Exception as exc:  # a Ray Client whose head went away ("closed channel")
            logging.getLogger("raylab").debug("ray.shutdown: %s", exc)
        if was is not None and was.mode == CLIENT:
            # A Ray Client whose server went away (the head was replaced) no longer
            # counts as initialized, yet stays registered, and ray.init would refuse.
            from ray.util import client_connect

            with contextlib.suppress(Exception):
                client_connect.disconnect()  # type: ignore[no-untyped-call]
    _stop_data_poller()
    if was is not None and was.node is not None:
        was.node.leave()  # after the driver: nothing of this kernel is left in the cluster
    if was:
        auth.forget_token()
    return was.cluster if was else None


def _stop_data_poller() -> None:
    """Ray Data's usage poller (a daemon thread from a dataset's first run until the
    process exits) asks the cluster's Prometheus every 10 s, after `ray.shutdown` too:
    for a cluster the kernel has left, and a poll at the interpreter's exit logs to a
    closed stderr and aborts the process ("could not acquire lock for <stderr> at
    interpreter shutdown", a notebook pod's kernel exiting Failed). Emptied, it polls
    nothing; the next connection's first dataset starts one of its own."""
    module: Any = sys.modules.get("ray.data._internal.usage.poller")
    if module is None:
        return
    with module._poller_lock:
        poller, module._poller = module._poller, None
    if poller is not None:
        poller._metrics = {}


# A kernel shut down while connected (the usual end of a notebook) exits with the poller
# too: emptied first, it cannot poll as the interpreter finalizes.
atexit.register(_stop_data_poller)
