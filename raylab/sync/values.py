"""Values of a cluster's environment variables: only in the owner's own 0600 file.

Names travel with the cluster (ClusterEnvironment); values never do. The cluster's truth
(cluster.json, the RayCluster) is read by the Jupyter server, listed and served over
REST, and on Kubernetes readable by whoever may read RayClusters in the namespace; a
secret does not belong there. A Kubernetes Secret would be another honest place, but it
needs RBAC on Secrets that a user's Role often lacks, and it would still be readable by
namespace admins. So the values stay where the user typed them: a file per cluster in
the user's Jupyter data folder, readable by the user alone, read by the user's kernels
(a second notebook, the sidebar's Connect) and removed by `down`. A kernel on another
machine gets the names and is told to pass the values again.

The file is keyed by backend, namespace, name and creation time, so that a cluster
recreated under an old name never inherits the old one's values.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..model import ClusterInfo
from .worker_kv_values import KEY_ENV
from .worker_values import FILE_ENV, HOOK, SETUP_HOOK_ENV

# Used with fullmatch: `match` with `$` would also take "KEY\n".
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Set by raylab itself or by Ray for its own processes: a user's value would break them.
RESERVED = frozenset(
    {"RAYLAB_CLUSTER", "RAY_ADDRESS", "PYTHONPATH", FILE_ENV, KEY_ENV, SETUP_HOOK_ENV}
)


def parse_env(items: list[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """`--env KEY=VALUE` (or `--env KEY`: this kernel's value) -> {KEY: VALUE}."""
    environ = dict(os.environ) if environ is None else environ
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not NAME.fullmatch(key):
            shown = key if len(key) <= 40 else key[:37] + "..."
            raise SpecError(
                "env",
                f"{shown!r} is not a variable name; use KEY=VALUE with KEY of letters, "
                "digits and _ (not starting with a digit)",
            )
        if key in RESERVED:
            raise SpecError("env", f"{key} is set by raylab and Ray themselves; choose another")
        if not sep:
            if key not in environ:
                raise SpecError(
                    "env", f"{key} has no value: use {key}=VALUE, or set it in this kernel first"
                )
            value = environ[key]
        out[key] = value
    return out


class EnvValues:
    def __init__(self, root: Path) -> None:
        self.root = root

    @classmethod
    def default(cls) -> EnvValues:
        from jupyter_core.paths import jupyter_data_dir

        return cls(Path(jupyter_data_dir()) / "raylab" / "env-values")

    def path(self, info: ClusterInfo) -> Path:
        where = info.namespace or "-"
        return self.root / f"{info.backend}-{where}-{info.name}-{int(info.created)}.json"

    def load(self, info: ClusterInfo) -> dict[str, str]:
        try:
            data = json.loads(self.path(info).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        return {str(k): str(v) for k, v in data.items()}

    def save(self, info: ClusterInfo, values: dict[str, str]) -> None:
        path = self.path(info)
        if not values:
            self.delete(info)
            return
        self._write_private(path, values)

    def for_local_workers(self, info: ClusterInfo, runtime_env: dict[str, Any]) -> dict[str, Any]:
        """`runtime_env` with its env-var values swapped for a 0600 file that the
        workers read as they start (worker_values.py): Ray then logs a path, never a
        value. For clusters whose workers run on this machine as this user (workers in
        pods read theirs from the cluster's KV: kv_values.py)."""
        values = runtime_env.get("env_vars")
        if not values:
            return runtime_env
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:16]
        # One file per set of values: another kernel's connect with other values does
        # not change what this connection's workers read.
        path = self.path(info).with_suffix(f".workers-{digest}.json")
        self._write_private(path, values)
        # The hook is named by the variable Ray's workers read it from
        # (ray_constants.WORKER_PROCESS_SETUP_HOOK_ENV_VAR), not by runtime_env's
        # `worker_process_setup_hook`: through Ray Client that field never reaches them.
        return {**runtime_env, "env_vars": {FILE_ENV: str(path), SETUP_HOOK_ENV: HOOK}}

    def _write_private(self, path: Path, values: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)
        tmp = path.with_suffix(".tmp")
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()  # a leftover would keep its own mode
        # Created 0600, never chmod-ed after the fact: no moment when others may read it.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(values, fh)
        tmp.replace(path)

    def delete(self, info: ClusterInfo) -> None:
        path = self.path(info)
        for each in (path, *path.parent.glob(f"{path.stem}.workers-*.json")):
            with contextlib.suppress(FileNotFoundError):
                each.unlink()
