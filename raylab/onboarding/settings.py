"""What onboarding makes for each user: `c.RaylabOnboarding`, beside `c.Raylab`.

Read from the same Jupyter config files as `c.Raylab` (the chart writes both into one
ConfigMap, which the hub pod mounts), and then from the hub's own configuration
(`hub.config.RaylabOnboarding` in Zero to JupyterHub), which comes first.
"""

from __future__ import annotations

from typing import Any

from traitlets import Bool, Dict, Unicode
from traitlets.config import Config, Configurable

from ..config import Settings, _load_server_config

SECTIONS = ("Raylab", "RaylabOnboarding")


class RaylabOnboarding(Configurable):
    """Onboarding options (`c.RaylabOnboarding.*`); `c.Raylab.namespace_template` and
    `c.Raylab.local_queue` say where and which queue."""

    service_account = Unicode(
        "raylab-{username}",
        help="Name of each user's service account, which their notebook pod runs as "
        "({username}: the JupyterHub name made safe as a DNS label). It lives in the "
        "pod's namespace (the hub's, or the user's own with enable_user_namespaces).",
    ).tag(config=True)
    cluster_role = Unicode(
        "raylab-user",
        help="ClusterRole bound to the user's service account in their namespace (the "
        "chart's <prefix>-user).",
    ).tag(config=True)
    resource_quota = Bool(
        True, help="Make the ResourceQuota raylab-user in each user's namespace."
    ).tag(config=True)
    resource_quota_hard = Dict(
        value_trait=Unicode(),
        help="The ResourceQuota's hard limits. Empty: requests.<GPU resource> = "
        "c.Raylab.max_gpus_per_user for each GPU resource of the GPU types, and "
        "count/rayclusters.ray.io = c.Raylab.max_clusters_per_user.",
    ).tag(config=True)
    cluster_queue = Unicode(
        "",
        help="Kueue ClusterQueue that each user's LocalQueues (c.Raylab.local_queue and "
        "the GPU types' own) point at. Empty: no LocalQueue is made.",
    ).tag(config=True)
    config_map = Unicode(
        "raylab-config",
        help="The chart's settings ConfigMap (<prefix>-config), which the notebook pods "
        "mount. A pod outside its namespace (enable_user_namespaces) cannot mount it, so "
        "onboarding copies it, same name and data, into the pod's namespace at each "
        "spawn. Empty: no copy.",
    ).tag(config=True)
    config_map_namespace = Unicode(
        "",
        help="Namespace of config_map (the chart's release namespace). Empty: the hub's "
        "own (its pod's; outside a pod, its kubeconfig context's).",
    ).tag(config=True)
    namespace_labels = Dict(
        value_trait=Unicode(),
        help="More labels on each user's namespace, e.g. "
        "{'pod-security.kubernetes.io/enforce': 'restricted'}.",
    ).tag(config=True)


def load(hub_config: Any = None) -> tuple[Settings, RaylabOnboarding]:
    """`c.Raylab` and `c.RaylabOnboarding` from the Jupyter config path, with the
    hub's configuration (a traitlets Config, e.g. `spawner.config`) over them."""
    merged = Config()
    for section in SECTIONS:
        merged.merge(_load_server_config(section))
        if isinstance(hub_config, Config) and section in hub_config:
            merged.merge(Config({section: hub_config[section]}))
    return Settings.from_config(merged), RaylabOnboarding(config=merged)
