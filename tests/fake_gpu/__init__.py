"""A FAKE GPU for tests: there is no GPU here, and Ray's reporter agent reads GPUs only
through NVML. `fake_nvml.c` is a `libnvidia-ml.so.1` that answers what Ray 2.60 asks from
files the test writes, per node (`head`, `worker-1`, ... as RAYLAB_NODE names it).

A cluster's nodes load it when its folder is first on LD_LIBRARY_PATH in the environment
they start with (the local backend's nodes inherit the test's environment).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from raylab.model import ClusterInfo
from raylab.service import ClusterService

HERE = Path(__file__).parent
LIBRARY = "libnvidia-ml.so.1"


class FakeGpus:
    """The fake NVML library and the figures it reports, under `root`."""

    def __init__(self, root: Path) -> None:
        self.lib_dir = root / "lib"
        self.figures = root / "figures"
        self.lib_dir.mkdir(parents=True, exist_ok=True)
        self.figures.mkdir(parents=True, exist_ok=True)
        if shutil.which("gcc") is None:
            raise RuntimeError("the fake NVML library needs gcc (apt-get install gcc)")
        subprocess.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-o", str(self.lib_dir / LIBRARY),
             str(HERE / "fake_nvml.c")],
            check=True,
        )  # fmt: skip

    def env(self) -> dict[str, str]:
        """What a node's environment needs to load the fake (prepended to LD_LIBRARY_PATH)."""
        path = os.environ.get("LD_LIBRARY_PATH", "")
        return {
            "LD_LIBRARY_PATH": os.pathsep.join(p for p in (str(self.lib_dir), path) if p),
            "RAYLAB_FAKE_NVML_DIR": str(self.figures),
        }

    def set(self, node: str, gpus: Iterable[tuple[float, float, float]]) -> None:
        """Node `node` reports these GPUs: (utilization %, memory used MiB, total MiB).
        Ray's reporter samples on its own period: a change shows within seconds."""
        lines = "".join(f"{u} {used} {total}\n" for u, used, total in gpus)
        tmp = self.figures / f".{node}.tmp"
        tmp.write_text(lines)
        tmp.replace(self.figures / node)  # whole, never half-written, for the reader


def served(service: ClusterService, name: str, utilization: float | None,
           timeout: float = 120) -> ClusterInfo:  # fmt: skip
    """The cluster once its dashboard serves this mean utilization (None: no GPUs at all):
    Ray's reporter samples on its own period (5 s by default)."""
    deadline = time.monotonic() + timeout
    while True:
        info = service.with_gpu_use([service.get(name)])[0]
        use = info.gpu_use
        assert use is not None
        if utilization is None and use.state == "not_measured":
            return info
        if utilization is not None and use.measured and use.utilization == utilization:
            return info
        assert time.monotonic() < deadline, f"the dashboard never showed {utilization}: {use}"
        time.sleep(1)
