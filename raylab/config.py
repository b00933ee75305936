"""Settings: what the admin configures once, read the same way by server, magics and CLI.

The admin writes `c.Raylab.<option> = ...` in `jupyter_server_config.py` (or `.json`).
The server extension gets it through traitlets; the magics and the CLI, which run in a
kernel or a shell, load the same files from Jupyter's config path, so a single-user pod
behaves the same whichever door a request comes through. Environment variables
`RAYLAB_BACKEND` and `RAYLAB_STATE_DIR` override for one process (tests, a laptop).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Float, Int, List, Unicode, default
from traitlets.config import Config, Configurable

from .profiles import DEFAULT_PROFILES, Defaults, GpuProfile, Profiles


class Raylab(Configurable):
    """raylab options (`c.Raylab.*` in jupyter_server_config.py)."""

    backend = Unicode(
        "local", help="Where clusters run: 'local' (Ray processes here) or 'kuberay'."
    ).tag(config=True)
    state_dir = Unicode(
        help="Folder of the local backend's cluster state "
        "(default: <jupyter data dir>/raylab/local)."
    ).tag(config=True)
    namespace_template = Unicode(
        "",
        help="KubeRay namespace, e.g. 'ray-{username}'. Empty: the pod's own namespace, "
        "else the kubeconfig context's.",
    ).tag(config=True)
    service_account = Unicode(
        "", help="Service account of Ray pods (KubeRay). Empty: the namespace default."
    ).tag(config=True)
    default_image = Unicode(
        "",
        help="Ray image for new clusters. Empty: rayproject/ray matching the kernel's Ray "
        "and Python versions.",
    ).tag(config=True)
    gpu_types = Dict(
        help="GPU profiles by name, replacing the built-in a100/h100/l4/cpu set: "
        "{'a100': {'description': ..., 'resource_key': 'nvidia.com/gpu', 'node_selector': "
        "{...}, 'tolerations': [...], 'max_gpus_per_worker': 8, 'default_cpus': '12', "
        "'default_memory': '96Gi'}}; 'head_node_selector' and 'head_tolerations' place "
        "the heads (default: any node without taints)",
    ).tag(config=True)
    default_gpu_type = Unicode("a100", help="GPU type when a request names none.").tag(config=True)
    default_workers = Int(1, help="Workers when a request names none.").tag(config=True)
    wait_timeout = Float(600.0, help="Seconds `up` waits for a cluster to be ready.").tag(
        config=True
    )
    max_gpus_per_user = Int(16, help="Quota: GPUs across one user's clusters.").tag(config=True)
    max_clusters_per_user = Int(4, help="Quota: clusters per user.").tag(config=True)
    max_workers_per_cluster = Int(16, help="Quota: workers in one cluster.").tag(config=True)
    admin_users = List(Unicode(), help="Usernames that see and manage every cluster.").tag(
        config=True
    )
    admin_groups = List(Unicode(), help="Groups whose members are admins.").tag(config=True)
    suppress_logical_gpu_warning = Bool(False).tag(config=True)

    @default("state_dir")
    def _default_state_dir(self) -> str:
        from jupyter_core.paths import jupyter_data_dir

        return str(Path(jupyter_data_dir()) / "raylab" / "local")


class Settings:
    """The resolved options, as plain values, plus the profiles built from them."""

    def __init__(self, options: Raylab) -> None:
        self.options = options
        gpu_types = (
            {n: GpuProfile.from_mapping(n, dict(v)) for n, v in options.gpu_types.items()}
            if options.gpu_types
            else dict(DEFAULT_PROFILES)
        )
        self.profiles = Profiles(
            gpu_types=gpu_types,
            defaults=Defaults(
                gpu_type=options.default_gpu_type,
                workers=options.default_workers,
                image=options.default_image or None,
                timeout=options.wait_timeout,
            ),
        )
        self.backend: str = os.environ.get("RAYLAB_BACKEND") or options.backend

    def local_state_dir(self) -> Path:
        return Path(os.environ.get("RAYLAB_STATE_DIR") or self.options.state_dir)

    @classmethod
    def from_config(cls, config: Config | None = None, **overrides: Any) -> Settings:
        return cls(Raylab(config=config or Config(), **overrides))

    @classmethod
    def load(cls) -> Settings:
        """Read `c.Raylab` from the Jupyter server config files on Jupyter's config path."""
        return cls.from_config(_load_server_config())


def _load_server_config() -> Config:
    from jupyter_core.paths import jupyter_config_path
    from traitlets.config.loader import JSONFileConfigLoader, PyFileConfigLoader

    merged = Config()
    # Lowest priority first, as jupyter_server does (jupyter_config_path lists highest first).
    for folder in reversed(jupyter_config_path()):
        for loader_cls, filename in (
            (JSONFileConfigLoader, "jupyter_server_config.json"),
            (PyFileConfigLoader, "jupyter_server_config.py"),
        ):
            if not (Path(folder) / filename).is_file():
                continue
            loaded = loader_cls(filename, path=folder).load_config()
            if "Raylab" in loaded:
                merged.merge(Config({"Raylab": loaded["Raylab"]}))
    return merged
