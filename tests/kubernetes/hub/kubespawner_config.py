# jupyterhub_config.py of the KubeSpawner hub (test_kubespawner.py): real JupyterHub, its
# real proxy and the real KubeSpawner, which makes each user's server a pod on the
# process nodes, onboarded at spawn by the chart's documented extraConfig. The hub runs
# outside Kubernetes, as the hub's service account (a kubeconfig with its token, in
# KUBECONFIG); everything else comes in one JSON file (the fixture writes it).
# What stands in for a part of Zero to JupyterHub is marked "stands in".
# ruff: noqa: F821 (`c` is given by JupyterHub's config loader)

import json
import os
from pathlib import Path

d = json.loads(Path(os.environ["RAYLAB_HUB_DEPLOYMENT"]).read_text())
work = Path(d["work"])

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = d["port"]
# Every address of the tests' network namespace: the proxy reaches the hub on
# loopback, the pods on the process nodes' bridge (hub_connect_ip).
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_port = d["hub_port"]
c.JupyterHub.hub_connect_ip = d["hub_connect_ip"]
c.JupyterHub.db_url = f"sqlite:///{work / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(work / "jupyterhub_cookie_secret")
c.JupyterHub.log_level = "INFO"
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = False
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{d['proxy_api_port']}"
c.ConfigurableHTTPProxy.auth_token = d["proxy_token"]

# Stands in for the site's login: fixed test passwords.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = d["user_password"]
c.SharedPasswordAuthenticator.admin_password = d["admin_password"]
c.Authenticator.allowed_users = set(d["users"])
c.Authenticator.admin_users = {d["admin"]}

c.JupyterHub.spawner_class = "kubespawner.KubeSpawner"
c.KubeSpawner.namespace = d["namespace"]
c.KubeSpawner.image = d["image"]  # never pulled: process nodes run this machine's venv
c.KubeSpawner.node_selector = d["node_selector"]
c.KubeSpawner.tolerations = d["tolerations"]
c.KubeSpawner.environment = d["environment"]
c.KubeSpawner.volumes = d["volumes"]
c.KubeSpawner.volume_mounts = d["volume_mounts"]
c.KubeSpawner.start_timeout = 120
c.KubeSpawner.http_timeout = 90
c.Spawner.default_url = "/lab"


def image_entrypoint(spawner, pod):
    """Stands in for the image's entrypoint: KubeSpawner sets only `args`, and a process
    node runs a container's `command` (the venv's single-user server; as root there)."""
    pod.spec.containers[0].command = [d["singleuser"], "--allow-root"]
    return pod


c.KubeSpawner.modify_pod_hook = image_entrypoint

# hub.extraConfig from the chart's README, run as Zero to JupyterHub runs it.
for code in d["extra_config"]:
    exec(code)

# Some users spawn with KubeSpawner's enable_user_namespaces (a site would set it for
# everyone): raylab's hook then puts their pod in their own Ray namespace.
raylab_hook = c.KubeSpawner.pre_spawn_hook


def user_namespaces_for_some(spawner):
    if spawner.user.name in d["user_namespace_users"]:
        spawner.enable_user_namespaces = True
    return raylab_hook(spawner)


c.KubeSpawner.pre_spawn_hook = user_namespaces_for_some

# One service for the tests: it makes the users' API tokens and stops their servers.
c.JupyterHub.services = [{"name": "tests", "api_token": d["api_token"]}]
c.JupyterHub.load_roles = [
    {
        "name": "tests",
        "scopes": ["list:users", "admin:servers", "admin:users", "tokens"],
        "services": ["tests"],
    }
]
