"""How much memory local nodes may share: the machine's, or less where a cgroup limits
this process (a Binder or JupyterHub container, a CI runner)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import psutil

CGROUP = Path("/sys/fs/cgroup")


def _own_cgroup_limits() -> list[int]:
    """The memory limits of this process's cgroup (v1 and v2), where they are readable."""
    limits = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            rel = path.lstrip("/")
            if controllers == "":  # v2: one unified hierarchy
                candidates = [CGROUP / rel / "memory.max", CGROUP / "memory.max"]
            elif "memory" in controllers.split(","):
                candidates = [
                    CGROUP / "memory" / rel / "memory.limit_in_bytes",
                    CGROUP / "memory" / "memory.limit_in_bytes",
                ]
            else:
                continue
            for file in candidates:
                with contextlib.suppress(OSError, ValueError):
                    limits.append(int(file.read_text().strip()))  # "max": no limit
    return limits


def memory_available() -> int:
    return min([psutil.virtual_memory().total, *_own_cgroup_limits()])


def object_store_bytes() -> int:
    # Ray's default (30% of memory per node) would promise the same memory to every node
    # on this host; share it instead, within Ray's 75 MiB minimum.
    return max(128 * 2**20, int(memory_available() * 0.3 / 4))
