"""Which standbys the admin asks for, whether this machine can afford them, and whether a
standby can serve a request."""

from __future__ import annotations

import os
import time

import psutil

from ..config import Settings
from ..errors import SpecError
from ..model import ClusterInfo, Phase
from ..spec import ClusterSpec
from ..versions import kernel_versions

GIB = 1024**3
# Fields a standby's shape cannot set: it gets a generated name, and its GPU type is its key.
_NOT_IN_A_SHAPE = ("name", "gpu_type")


def standby_specs(settings: Settings) -> list[ClusterSpec]:
    """One spec per GPU type in `c.Raylab.standby` (each with a fresh generated name).
    Raises SpecError naming the GPU type and the field when a shape is not one `up`
    would accept."""
    specs = []
    for gpu_type, shape in sorted(settings.options.standby.items()):
        where = f"c.Raylab.standby[{gpu_type!r}]"
        if not isinstance(shape, dict):
            raise SpecError("standby", f"{where} must map the fields of `up` to values")
        for key in _NOT_IN_A_SHAPE:
            if key in shape:
                raise SpecError("standby", f"{where} cannot set {key!r}: the key names it")
        try:
            specs.append(ClusterSpec.from_mapping({**shape, "gpu_type": gpu_type},
                                                  settings.profiles))  # fmt: skip
        except SpecError as exc:
            raise SpecError("standby", f"{where}: {exc.message}") from None
    return specs


def same_shape(a: ClusterSpec, b: ClusterSpec) -> bool:
    """Whether a cluster of spec `a` serves a request for `b` (all but the name alike)."""
    return {**a.to_json(), "name": ""} == {**b.to_json(), "name": ""}


def machine_refuses(settings: Settings, backend_name: str) -> str | None:
    """Why this machine makes no standby (the local backend's clusters take its own
    cores and memory), or None."""
    if backend_name != "local":
        return None
    o = settings.options
    cores = os.cpu_count() or 1
    if cores < o.standby_min_cores:
        return (
            f"this machine has {cores} CPU cores, under standby_min_cores ({o.standby_min_cores})"
        )
    free = psutil.virtual_memory().available / GIB
    if free < o.standby_min_free_gib:
        return (
            f"{free:.1f} GiB of memory is free here, under standby_min_free_gib "
            f"({o.standby_min_free_gib:g})"
        )
    return None


def unusable(info: ClusterInfo, now: float | None = None) -> str | None:
    """Why the standby `info` must not be claimed (said after its name), or None."""
    # On its way (queued, scheduled, starting) is still ahead of a cold start.
    if info.phase not in (Phase.READY, Phase.STARTING, Phase.PENDING, Phase.QUEUED):
        why = f": {info.reason}" if info.reason else ""
        return f"is {info.phase}{why}"
    if info.standby_until is not None and info.standby_until <= (now or time.time()):
        return "reached the end of its time"
    ray_here, python_here = kernel_versions()
    if info.ray_version and info.ray_version != ray_here:
        return f"runs Ray {info.ray_version}, this kernel Ray {ray_here}"
    if info.python_version and info.python_version != python_here:
        return f"runs Python {info.python_version}, this kernel Python {python_here}"
    return None
