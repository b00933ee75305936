# The test hub's jupyterhub_config.py: real JupyterHub, its real proxy, a local-process
# spawner and fixed test passwords, with the Zero to JupyterHub values of
# docs/zero-to-jupyterhub.md applied as the chart applies them. Everything this file
# needs comes in one JSON file (deployment.py writes it), so it imports nothing from the
# tests. What stands in for Kubernetes-only parts is marked "stands in".
# ruff: noqa: F821 (`c` is given by JupyterHub's config loader)

import json
import os
from pathlib import Path

d = json.loads(Path(os.environ["RAYLAB_HUB_DEPLOYMENT"]).read_text())
work = Path(d["work"])

c.JupyterHub.ip = "127.0.0.1"
c.JupyterHub.port = d["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = d["hub_port"]
c.JupyterHub.db_url = f"sqlite:///{work / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(work / "jupyterhub_cookie_secret")
c.JupyterHub.log_level = "INFO"

# As in Zero to JupyterHub: the proxy runs on its own (its pod) and survives a hub
# restart, and so do the users' servers (their pods).
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = False
c.ConfigurableHTTPProxy.should_start = False
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{d['proxy_api_port']}"
c.ConfigurableHTTPProxy.auth_token = d["proxy_token"]

# Stands in for the site's login (OAuth, LDAP...): fixed test passwords.
c.JupyterHub.authenticator_class = "shared-password"
c.SharedPasswordAuthenticator.user_password = d["user_password"]
c.SharedPasswordAuthenticator.admin_password = d["admin_password"]
c.Authenticator.allowed_users = set(d["users"])
c.Authenticator.admin_users = {d["admin"]}

# Stands in for KubeSpawner: each user's server is a process with a home of its own.
c.JupyterHub.spawner_class = "simple"
c.SimpleLocalProcessSpawner.home_dir_template = str(work / "home" / "{username}")
c.Spawner.cmd = [d["singleuser"]]
c.Spawner.args = ["--allow-root"]  # the tests run as root; a pod's user would not be
c.Spawner.default_url = "/lab"
c.Spawner.start_timeout = 180
c.Spawner.http_timeout = 180
c.Spawner.environment = d["environment"]  # singleuser.extraEnv, and where its files are

# hub.extraConfig, run as the chart runs it.
for code in d["extra_config"]:
    exec(code)

documented_hook = c.Spawner.pre_spawn_hook


def process_identity(spawner):
    """Stands in for the service account token a pod gets mounted: a process gets a
    kubeconfig with a token of the account the documented hook chose."""
    documented_hook(spawner)
    kubeconfig = d["kubeconfigs"][spawner.service_account]
    spawner.environment = {**spawner.environment, "KUBECONFIG": kubeconfig}


c.Spawner.pre_spawn_hook = process_identity

# hub.services, as the chart turns them into JupyterHub services, and one for the
# tests (an API token with the rights of the hub's own idle culler).
c.JupyterHub.services = [*d["services"], {"name": "tests", "api_token": d["api_token"]}]
c.JupyterHub.load_roles = [
    {
        "name": "tests",
        "scopes": ["list:users", "read:users:activity", "admin:servers", "admin:users"],
        "services": ["tests"],
    }
]
