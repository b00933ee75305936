"""GPU types and cluster defaults: the one place defaults come from.

An admin replaces or extends these in `jupyter_server_config.py` (see `config.py`);
the magics, the CLI and the server all read the same `Profiles` object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GpuProfile:
    """How one GPU type is requested and where its pods may run."""

    name: str
    description: str
    resource_key: str = "nvidia.com/gpu"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, str]] = field(default_factory=list)
    # Where the clusters' heads (no GPUs) run: by default on any node without taints;
    # an admin can pin them to a CPU pool of their own.
    head_node_selector: dict[str, str] = field(default_factory=dict)
    head_tolerations: list[dict[str, str]] = field(default_factory=list)
    max_gpus_per_worker: int = 8
    default_cpus: str = "8"
    default_memory: str = "32Gi"
    # Idle clusters of this type are suspended after this long; None: 60 for GPU types,
    # 0 (never) for CPU-only ones.
    idle_suspend_minutes: float | None = None
    # The Kueue LocalQueue of this type's clusters, over c.Raylab.local_queue ('': none).
    local_queue: str | None = None
    # Environment of this type's worker containers (KubeRay), as its nodes need it: NCCL_*
    # for their network, or where their NVIDIA libraries are (LD_LIBRARY_PATH).
    worker_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.worker_env, dict):
            raise ValueError(f"GPU profile {self.name!r}: worker_env must be a mapping of "
                             "environment variable names to strings")  # fmt: skip
        for key, value in self.worker_env.items():
            if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
                raise ValueError(f"GPU profile {self.name!r}: worker_env name {key!r} is not "
                                 "an environment variable name (letters, digits, _)")  # fmt: skip
            if not isinstance(value, str) or "\0" in value:
                raise ValueError(f"GPU profile {self.name!r}: worker_env {key} must be a "
                                 "string without NUL characters")  # fmt: skip

    @property
    def has_gpus(self) -> bool:
        return self.max_gpus_per_worker > 0

    @property
    def idle_suspend_limit_minutes(self) -> float:
        """The admin's idle limit in minutes (0: never suspended for idleness)."""
        if self.idle_suspend_minutes is not None:
            return max(0.0, float(self.idle_suspend_minutes))
        return DEFAULT_IDLE_SUSPEND_MINUTES if self.has_gpus else 0.0

    @classmethod
    def from_mapping(cls, name: str, data: dict[str, Any]) -> GpuProfile:
        allowed = {f for f in cls.__dataclass_fields__ if f != "name"}
        unknown = set(data) - allowed
        if unknown:
            raise ValueError(
                f"GPU profile {name!r}: unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}"
            )
        return cls(name=name, **data)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "resource_key": self.resource_key,
            "node_selector": dict(self.node_selector),
            "tolerations": [dict(t) for t in self.tolerations],
            "head_node_selector": dict(self.head_node_selector),
            "head_tolerations": [dict(t) for t in self.head_tolerations],
            "max_gpus_per_worker": self.max_gpus_per_worker,
            "default_cpus": self.default_cpus,
            "default_memory": self.default_memory,
            "idle_suspend_minutes": self.idle_suspend_limit_minutes,
        }


DEFAULT_IDLE_SUSPEND_MINUTES = 60.0
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GPU_TAINT = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]


def _nvidia(
    name: str, product: str, description: str, per_worker: int, cpus: str, memory: str
) -> GpuProfile:
    return GpuProfile(
        name=name,
        description=description,
        node_selector={"nvidia.com/gpu.product": product},
        tolerations=list(_GPU_TAINT),
        max_gpus_per_worker=per_worker,
        default_cpus=cpus,
        default_memory=memory,
    )


# Labels follow NVIDIA GPU feature discovery (`nvidia.com/gpu.product`), which GPU node
# pools on every major cloud carry; the taint is the usual one on GPU node pools.
DEFAULT_PROFILES: dict[str, GpuProfile] = {
    p.name: p
    for p in (
        _nvidia("a100", "NVIDIA-A100-SXM4-80GB", "NVIDIA A100 80GB", 8, "12", "96Gi"),
        _nvidia("h100", "NVIDIA-H100-80GB-HBM3", "NVIDIA H100 80GB", 8, "16", "160Gi"),
        _nvidia("l4", "NVIDIA-L4", "NVIDIA L4 24GB", 4, "8", "32Gi"),
        GpuProfile(
            name="cpu",
            description="CPU only",
            max_gpus_per_worker=0,
            default_cpus="4",
            default_memory="16Gi",
        ),
    )
}


@dataclass(frozen=True)
class Defaults:
    """Values used when a request leaves a field out."""

    gpu_type: str = "a100"
    gpus: int = 0
    workers: int = 1
    head_cpus: str = "2"
    head_memory: str = "8Gi"
    image: str | None = None  # None: a rayproject/ray image matching the kernel's Ray and Python
    timeout: float = 600.0
    idle_timeout_minutes: int | None = None


@dataclass(frozen=True)
class Profiles:
    gpu_types: dict[str, GpuProfile] = field(default_factory=lambda: dict(DEFAULT_PROFILES))
    defaults: Defaults = field(default_factory=Defaults)

    def get(self, name: str) -> GpuProfile | None:
        return self.gpu_types.get(name)

    def default_gpu_type(self, gpus: int) -> str:
        """The GPU type a request gets when it names none: CPU-only when it asks for no GPUs."""
        if gpus == 0 and "cpu" in self.gpu_types:
            return "cpu"
        return self.defaults.gpu_type

    def to_json(self) -> dict[str, Any]:
        d = self.defaults
        return {
            "gpu_types": [p.to_json() for p in self.gpu_types.values()],
            "defaults": {
                "gpu_type": d.gpu_type,
                "gpus": d.gpus,
                "workers": d.workers,
                "image": d.image,
                "timeout": d.timeout,
            },
        }
