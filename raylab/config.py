"""Settings: what the admin configures once, read the same way by server, magics and CLI.

The admin writes `c.Raylab.<option> = ...` in `jupyter_server_config.py` (or `.json`).
The server extension gets it through traitlets; the magics and the CLI, which run in a
kernel or a shell, load the same files from Jupyter's config path, so a single-user pod
behaves the same whichever door a request comes through. Environment variables
`RAYLAB_BACKEND` and `RAYLAB_STATE_DIR` override for one process (tests, a laptop).
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, Unicode, default
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
    admin_watch_namespaces = List(
        Unicode(),
        help="KubeRay: the namespaces whose clusters an admin's server also shows, beside its "
        "own ('*': every namespace). Used only when the server's user is an admin; needs the "
        "ClusterRole raylab-admin-overview of docs/kubernetes-rbac.md.",
    ).tag(config=True)
    suppress_logical_gpu_warning = Bool(False).tag(config=True)
    ray_auth = Enum(
        ["token", "disabled"],
        "token",
        help="Ray's token authentication on every new cluster: 'token' (a random token per "
        "cluster, given only to its owner) or 'disabled' (anyone who reaches the cluster's "
        "ports can use it).",
    ).tag(config=True)
    network_policy = Bool(
        True,
        help="KubeRay: NetworkPolicies around every new cluster, so that only its own pods, "
        "its owner's notebook pod, the KubeRay operator and monitoring reach its Ray ports.",
    ).tag(config=True)
    kernel_joins_cluster = Bool(
        True,
        help="KubeRay: a kernel in a pod of the same Kubernetes joins its cluster as a Ray "
        "node that offers nothing (no CPUs, no GPUs) and drives it as a real Ray driver "
        "(Ray Data works; calls and objects cost what they cost in any Ray script). Its "
        "pod must admit the ports of docs/zero-to-jupyterhub.md from the clusters' pods. "
        "False: such kernels use Ray Client, as a laptop does.",
    ).tag(config=True)
    notebook_pod_labels = Dict(
        Unicode(),
        default_value={"component": "singleuser-server", "hub.jupyter.org/username": "{username}"},
        help="KubeRay: labels of the owner's notebook pod, which may reach the head's Ray "
        "Client and dashboard ports ({username}: the owner, made safe as a label value). "
        "The default is what Zero to JupyterHub puts on single-user pods.",
    ).tag(config=True)
    notebook_namespace = Unicode(
        "",
        help="KubeRay: namespace of the notebook pods. Empty: this Jupyter server's own "
        "namespace when it runs in a pod, else the cluster's.",
    ).tag(config=True)
    network_policy_peers = List(
        Dict(),
        help="KubeRay: more NetworkPolicy peers (podSelector / namespaceSelector) that may "
        "reach the head's Ray Client and dashboard ports, e.g. a shared Jupyter server.",
    ).tag(config=True)
    operator_namespace = Unicode(
        "", help="KubeRay: namespace of the KubeRay operator. Empty: any namespace."
    ).tag(config=True)
    operator_pod_labels = Dict(
        Unicode(),
        default_value={"app.kubernetes.io/name": "kuberay-operator"},
        help="KubeRay: labels of the KubeRay operator's pod (its Helm chart's by default).",
    ).tag(config=True)
    local_queue = Unicode(
        "",
        help="KubeRay: the Kueue LocalQueue new clusters wait in (the label "
        "kueue.x-k8s.io/queue-name); a GPU profile's own local_queue comes first. Empty: "
        "no Kueue, clusters start at once.",
    ).tag(config=True)
    priority_classes = List(
        Unicode(),
        help="KubeRay with Kueue: the WorkloadPriorityClasses users may ask for with "
        "`up --priority NAME` (the first is the default). Empty: Kueue's default priority.",
    ).tag(config=True)
    monitoring_namespace = Unicode(
        "monitoring",
        help="KubeRay: namespace whose pods may scrape Ray's metrics port. Empty: none.",
    ).tag(config=True)
    working_dir_max_mib = Int(
        100,
        help="Largest working directory `up`/`connect` ship to a cluster, in MiB (after "
        "excludes); above it they refuse and list the largest files.",
    ).tag(config=True)
    sync_pip = Bool(
        False,
        help="A plain `%pip install PKG` in a kernel connected to a cluster also adds PKG "
        "to the cluster's environment (as `%raycluster pip install` does).",
    ).tag(config=True)

    # --- idle suspension and GPU-hours (raylab/culler) ---
    idle_suspend_minutes = Dict(
        Float(),
        help="Minutes after which an idle cluster is suspended, by GPU type, e.g. "
        "{'a100': 30, 'cpu': 0} (0: never). Types left out use their profile's "
        "idle_suspend_minutes: 60 for GPU types, 0 for cpu. Users may ask for less.",
    ).tag(config=True)
    idle_warning_minutes = Float(
        10.0, help="How long before suspending an idle cluster its owner is warned."
    ).tag(config=True)
    activity_unknown_grace_minutes = Float(
        30.0,
        help="A cluster whose activity cannot be read is never suspended. Its idle clock "
        "survives a gap this long; after a longer one it starts again.",
    ).tag(config=True)
    gpu_busy_percent = Float(
        5.0,
        help="A GPU at or above this utilization (percent) is busy: work that keeps its "
        "cluster from idle suspension, and a used GPU in the overview and GPU-hours.",
    ).tag(config=True)
    serve_timeout_s = Float(
        60.0,
        min=1.0,
        max=3600.0,
        help="How long the Serve proxy (<base_url>raylab/clusters/NAME/serve/...) waits for "
        "an app's answer before a 504 naming it; streamed answers (text/event-stream) and "
        "websockets are not cut.",
    ).tag(config=True)
    connected_kernel_is_work = List(
        Unicode(),
        [],
        help="GPU types (or '*') for which a connected notebook kernel counts as work even "
        "while it runs nothing: raylab's rule before GPU use was read. Left empty, only "
        "cells, tasks, jobs and busy GPUs keep a cluster in use.",
    ).tag(config=True)
    culler_dashboard_url = Unicode(
        "",
        help="Where cullers reach each cluster's dashboard, with {name} and {namespace}, "
        "when not the usual way (the head Service from inside Kubernetes, a port-forward "
        "from outside; the local backend's own port), e.g. through a proxy of yours.",
    ).tag(config=True)
    culler = Enum(
        ["server", "off"],
        "server",
        help="Who suspends this server's user's idle clusters: 'server' (this Jupyter "
        "server, while it runs) or 'off' (only a `raylab culler` service or Deployment). "
        "Both may run at once: they agree through conditional updates.",
    ).tag(config=True)
    cull_interval_seconds = Float(
        60.0, help="Seconds between two culler sweeps (idle checks and GPU-hour records)."
    ).tag(config=True)
    usage_flush_seconds = Float(
        300.0, help="Seconds between two writes of the GPU-hours ledger by a culler."
    ).tag(config=True)
    usage_retention_days = Float(
        90.0, help="Days the GPU-hours ledger keeps what clusters used."
    ).tag(config=True)

    # --- standby clusters (raylab/standby) ---
    standby = Dict(
        Dict(),
        help="A standby cluster per user and GPU type, made when the user's Jupyter server "
        "starts and claimed by their next `up` (without --name) that asks for the same "
        "shape, e.g. {'a100': {'gpus': 2, 'workers': 2}}: the fields of `up`, without "
        "name. It counts against the user's quota and GPU-hours while it waits, is never "
        "idle-suspended, and is deleted after standby_ttl_minutes or when the server stops. "
        "Empty: none.",
    ).tag(config=True)
    standby_ttl_minutes = Float(
        30.0, min=1.0, help="How long a standby cluster waits to be claimed before deletion."
    ).tag(config=True)
    standby_priority_class = Unicode(
        "",
        help="KubeRay with Kueue: the WorkloadPriorityClass a standby waits at (the lowest "
        "there is, so that real work preempts it); a claim gives it the users' default.",
    ).tag(config=True)
    standby_min_cores = Int(
        4, help="Local backend: no standby on a machine with fewer CPU cores than this."
    ).tag(config=True)
    standby_min_free_gib = Float(
        8.0, help="Local backend: no standby while less memory than this (GiB) is free."
    ).tag(config=True)

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
        for name, minutes in options.idle_suspend_minutes.items():
            if name in gpu_types:
                gpu_types[name] = replace(gpu_types[name], idle_suspend_minutes=float(minutes))
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
        self.queueing: bool = bool(
            options.local_queue or any(p.local_queue for p in gpu_types.values())
        )
        self.token_auth: bool = options.ray_auth == "token"

    def local_queue(self, gpu_type: str) -> str:
        """The Kueue LocalQueue of new clusters of `gpu_type` ('' for none)."""
        profile = self.profiles.get(gpu_type)
        if profile is not None and profile.local_queue is not None:
            return profile.local_queue
        return str(self.options.local_queue)

    def local_state_dir(self) -> Path:
        return Path(os.environ.get("RAYLAB_STATE_DIR") or self.options.state_dir)

    @classmethod
    def from_config(cls, config: Config | None = None, **overrides: Any) -> Settings:
        return cls(Raylab(config=config or Config(), **overrides))

    @classmethod
    def load(cls) -> Settings:
        """Read `c.Raylab` from the Jupyter server config files on Jupyter's config path."""
        return cls.from_config(_load_server_config())


def _load_server_config(section: str = "Raylab") -> Config:
    """`section` (a Configurable's name) from the Jupyter server config files."""
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
            if section in loaded:
                merged.merge(Config({section: loaded[section]}))
    return merged
