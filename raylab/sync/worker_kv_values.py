"""Run by Ray in each worker of a KubeRay cluster as it starts (its setup hook).

It puts the values of the cluster's environment variables into the worker's environment
from the cluster's own internal KV, where the kernel put them once connected
(kv_values.py); only their key travels in Ray's runtime env, which Ray logs and passes on
worker command lines. The pods' image may have no raylab: this file is shipped to them
as a package of its own (`raylab_worker_env`, through `py_modules`), so it imports
nothing beyond the standard library and Ray.
"""

from __future__ import annotations

import json
import os
import time

KEY_ENV = "RAYLAB_ENV_VALUES_KEY"
NAMESPACE = "raylab"
WAIT_S = 60.0


def load() -> None:
    key = os.environ.get(KEY_ENV)
    if not key:
        return
    from ray.experimental.internal_kv import _internal_kv_get

    # The kernel puts the values just after Ray Client connects: a worker Ray starts
    # meanwhile waits for them rather than run without.
    deadline = time.monotonic() + WAIT_S
    while (data := _internal_kv_get(key, namespace=NAMESPACE)) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"raylab: no env values under {key!r} in the cluster's KV after "
                f"{WAIT_S:.0f} s; connect the kernel again"
            )
        time.sleep(0.2)
    values = json.loads(data)
    os.environ.update({str(k): str(v) for k, v in values.items()})
