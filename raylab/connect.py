"""Connect this kernel to a cluster through Ray Client, checking versions first.

Ray Client refuses a kernel whose Ray version or Python minor differs from the
cluster's, with an error that does not say what to do; we compare before connecting.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from . import auth
from .errors import BackendUnavailable
from .model import ClusterInfo
from .sync.errors import RuntimeEnvFailed, runtime_env_failure
from .versions import check_versions, running_versions


@dataclass
class _Connection:
    cluster: str
    address: str
    context: Any
    environment: str = ""  # fingerprint of the runtime_env it was made with


_current: _Connection | None = None


def connected_cluster() -> str | None:
    return _current.cluster if _current else None


def connected_address() -> str | None:
    """The Ray Client address in use: from outside Kubernetes, a local port-forward."""
    return _current.address if _current else None


def connect(
    info: ClusterInfo,
    timeout: float = 60.0,
    address: str | None = None,
    token: str | None = None,
    runtime_env: dict[str, Any] | None = None,
    environment: str = "",
    dashboard: str | None = None,
    then: Callable[[], None] | None = None,
) -> None:
    """Attach this process to the cluster; a no-op when already attached to it with the
    same environment.

    `address` overrides the cluster's own client endpoint (KubeRay from outside
    Kubernetes: a local port-forward); `token` is the cluster's Ray token (None for a
    cluster made with token auth off). `runtime_env` is Ray's (built by runtime_env.py)
    and `environment` its fingerprint, which changes when anything it ships changes.
    `dashboard` is where to read the head's own versions before Ray Client tries (and
    fails less clearly). `then` runs once connected, before any work is sent (it puts
    what the workers read as they start: sync/kv_values.py); if it fails, so does this."""
    global _current
    address = address or info.endpoints.client
    if not address:
        raise BackendUnavailable(
            f"cluster {info.name!r} has no Ray Client endpoint yet (phase {info.phase})",
            detail=f"`%raycluster status {info.name}` shows why",
        )
    if (
        _current
        and _current.cluster == info.name
        and _current.address == address
        and _current.environment == environment
        and _alive()
    ):
        return
    check_versions(info, running_versions(dashboard or info.endpoints.dashboard, token))
    import ray

    disconnect()
    auth.use_token(token)
    deadline = time.monotonic() + timeout
    while True:
        try:
            with _quiet_thread_warning():
                context = ray.init(
                    address,
                    logging_level=logging.WARNING,
                    log_to_driver=True,
                    runtime_env=runtime_env or None,
                )
            break
        except ConnectionError as exc:
            failure = runtime_env_failure(str(exc))
            if failure is not None:  # retrying would fail the same way, minutes later
                auth.forget_token()
                raise RuntimeEnvFailed(
                    f"cluster {info.name!r} could not set up this kernel's environment: {failure}",
                    detail="fix the package (--pip, --requirements) or leave it out; "
                    "this kernel is not connected",
                ) from None
            # The client server can take a moment after the head reports ready.
            if time.monotonic() >= deadline:
                auth.forget_token()
                raise BackendUnavailable(
                    f"cannot reach Ray Client of cluster {info.name!r} at {address}: {exc}",
                    detail=f"`%raycluster status {info.name}` and `%raycluster logs "
                    f"{info.name}` show the cluster's state",
                ) from None
            time.sleep(0.5)
    _current = _Connection(info.name, address, context, environment)
    if then is not None:
        try:
            then()
        except BaseException:
            disconnect()  # workers would start without what `then` gives them
            raise


def _alive() -> bool:
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
    if "ray" in sys.modules:
        import ray

        try:
            if ray.is_initialized():  # itself a call to the server, in client mode
                ray.shutdown()
        except Exception as exc:  # a Ray Client whose head went away ("closed channel")
            logging.getLogger("raylab").debug("ray.shutdown: %s", exc)
        if was is not None:
            # A Ray Client whose server went away (the head was replaced) no longer
            # counts as initialized, yet stays registered, and ray.init would refuse.
            from ray.util import client_connect

            with contextlib.suppress(Exception):
                client_connect.disconnect()  # type: ignore[no-untyped-call]
    if was:
        auth.forget_token()
    return was.cluster if was else None
