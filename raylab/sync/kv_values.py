"""Env values for workers in pods: through the cluster's internal KV, not Ray's logs.

Values given to Ray's runtime env are logged by its runtime-env agent and the Ray Client
server and show on worker command lines; pods cannot read the owner's 0600 file that a
local cluster's workers read (values.py). So, once Ray Client is connected, the kernel
puts the values in the cluster's GCS internal KV, and the runtime env carries only their
key and a setup hook (worker_kv_values.py, shipped as a package of its own since the
pods' image may lack raylab) that reads them as each worker starts.

The key is random, not a digest of the values: Ray logs it, and a digest would let a
reader of the logs check guesses of a short value. One key per connect also keeps
another kernel's connect from changing what this connection's workers read.

Whoever holds the cluster's token (or reaches its GCS, with token auth off) can read the
KV; they can run code as the owner on the cluster anyway, and so read the workers'
environment: the KV gives them nothing more.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import worker_kv_values
from .packages import default_cache
from .worker_kv_values import KEY_ENV, NAMESPACE
from .worker_values import SETUP_HOOK_ENV

PACKAGE = "raylab_worker_env"  # the hook's name in the pods
HOOK = f"{PACKAGE}.load"


def for_pod_workers(
    runtime_env: dict[str, Any], cache: Path | None = None
) -> tuple[dict[str, Any], Callable[[], None] | None]:
    """`runtime_env` with its env-var values swapped for a KV key and the hook, and the
    call that puts the values in the KV (once connected; None when there are none)."""
    values = runtime_env.get("env_vars")
    if not values:
        return runtime_env, None
    key = f"env-values-{secrets.token_hex(16)}"
    payload = json.dumps(values)

    def put() -> None:
        from ray.experimental.internal_kv import _internal_kv_put

        _internal_kv_put(key, payload, overwrite=True, namespace=NAMESPACE)

    package = hook_package(cache or default_cache().parent / "worker-env")
    modules = [*runtime_env.get("py_modules", ()), str(package)]
    # The hook is named by the variable Ray's workers read it from: runtime_env's
    # `worker_process_setup_hook` never reaches them through Ray Client.
    env_vars = {KEY_ENV: key, SETUP_HOOK_ENV: HOOK}
    return {**runtime_env, "env_vars": env_vars, "py_modules": modules}, put


def hook_package(cache: Path) -> Path:
    """The folder of the package `raylab_worker_env`: the hook's own source as its
    `__init__.py`, one folder per version of it."""
    source = Path(worker_kv_values.__file__).read_bytes()
    parent = cache / hashlib.sha256(source).hexdigest()[:16]
    package = parent / PACKAGE
    init = package / "__init__.py"
    if init.is_file() and init.read_bytes() == source:
        return package
    package.mkdir(parents=True, exist_ok=True)
    # Written beside the package, not in it (what is in it ships), then moved in whole:
    # another kernel shipping it meanwhile never sees half a file.
    tmp = parent / f".init-{os.getpid()}.tmp"
    tmp.write_bytes(source)
    tmp.replace(init)
    return package
