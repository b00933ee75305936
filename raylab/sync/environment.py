"""ClusterEnvironment: the Ray environment a cluster remembers, with no secret in it.

It lives with the cluster (the local backend's cluster.json, a RayCluster annotation), so
every kernel that connects, the sidebar's Connect and the export see the same one. It
holds environment-variable *names* only: values stay in the owner's 0600 file
(env_values.py), so nothing the server reads, lists or serves can carry them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

# Where the KubeRay backend keeps it: the RayCluster is the truth there.
ANNOTATION = "raylab.io/environment"


@dataclass(frozen=True)
class ClusterEnvironment:
    # Absolute path of the folder shipped as Ray's working_dir (None: nothing synced).
    working_dir: str | None = None
    working_dir_bytes: int = 0  # what was shipped last time, after excludes
    working_dir_files: int = 0
    excludes: tuple[str, ...] = ()  # the user's --exclude patterns (gitignore syntax)
    pip: tuple[str, ...] = ()  # requirements Ray's pip installs on the workers (an index)
    wheels: tuple[str, ...] = ()  # local wheel files, unpacked and shipped as they are
    # Distributions installed in the kernel in development mode or from local files,
    # shipped as py_modules (their files, not an index name).
    local_packages: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()

    def with_changes(self, **changes: Any) -> ClusterEnvironment:
        return replace(self, **changes)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def to_annotation(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: object) -> ClusterEnvironment | None:
        """Read what a backend stored; None for nothing or for something unreadable
        (an older or hand-edited value is not worth failing a listing for)."""
        if not isinstance(data, dict):
            return None
        try:
            return cls(
                working_dir=_optional_str(data.get("working_dir")),
                working_dir_bytes=int(data.get("working_dir_bytes") or 0),
                working_dir_files=int(data.get("working_dir_files") or 0),
                excludes=_strings(data.get("excludes")),
                pip=_strings(data.get("pip")),
                wheels=_strings(data.get("wheels")),
                local_packages=_strings(data.get("local_packages")),
                env_names=_strings(data.get("env_names")),
            )
        except (TypeError, ValueError):
            return None

    @classmethod
    def from_annotation(cls, text: str | None) -> ClusterEnvironment | None:
        if not text:
            return None
        try:
            return cls.from_json(json.loads(text))
        except ValueError:
            return None


def _optional_str(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(value)
    return value


def _strings(value: object) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
        raise TypeError(value)
    return tuple(value)


@dataclass(frozen=True)
class EnvOptions:
    """What the user typed; None (or False) for an option not given."""

    working_dir: str | None = None
    no_sync: bool = False
    excludes: tuple[str, ...] | None = None
    pip: tuple[str, ...] | None = None
    requirements: str | None = None
    env: tuple[str, ...] | None = None

    @property
    def any_given(self) -> bool:
        return (
            self.working_dir is not None
            or self.no_sync
            or any(v is not None for v in (self.excludes, self.pip, self.requirements, self.env))
        )
