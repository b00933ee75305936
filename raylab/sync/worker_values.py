"""Run by Ray in each worker of a local cluster as it starts (`worker_process_setup_hook`).

It puts the values of the cluster's environment variables into the worker's environment
from the owner's 0600 file (values.py), whose path is all that travels: a value given to
Ray's runtime env instead is logged by its runtime-env agent and by the Ray Client server,
and shows on worker command lines. Workers of a local cluster run as the owner on the
owner's machine, so they can read that file and nobody else can. Kept free of imports
beyond the standard library: every worker runs it.
"""

from __future__ import annotations

import json
import os

FILE_ENV = "RAYLAB_ENV_VALUES_FILE"
HOOK = f"{__name__}.load"
SETUP_HOOK_ENV = "__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR"  # where Ray's workers find it


def load() -> None:
    path = os.environ.get(FILE_ENV)
    if path:
        with open(path) as fh:
            values = json.load(fh)
        os.environ.update({str(k): str(v) for k, v in values.items()})
