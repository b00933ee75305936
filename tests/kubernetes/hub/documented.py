"""The Zero to JupyterHub configuration of docs/zero-to-jupyterhub.md, read from the page.

The hub deployment of these tests is made from these values, so the page is what is
tested: the single-user environment and raylab's config file, the hub's extraConfig
(run as written) and its raylab-culler service.
"""

from __future__ import annotations

from typing import Any

import yaml

from ..kuberay_support import ROOT

DOC = ROOT / "docs" / "zero-to-jupyterhub.md"
SECTION = "### Zero to JupyterHub values, by hand"


def helm_values() -> dict[str, Any]:
    """The first YAML block of the page's Helm values section."""
    text = DOC.read_text()
    section = text.split(SECTION, 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    values: dict[str, Any] = yaml.safe_load(block)
    return values


MOUNT = "/usr/local/etc/jupyter/jupyter_server_config.json"  # on Jupyter's config path


def raylab_config(values: dict[str, Any], pod: str = "singleuser") -> dict[str, Any]:
    """What the page mounts as jupyter_server_config.json in the users' pods
    (`singleuser`) or in the hub's, where its raylab-culler service reads it (`hub`)."""
    files = values[pod]["extraFiles"]["raylab-config"]
    assert files["mountPath"] == MOUNT, f"{pod}'s raylab-config is not mounted at {MOUNT}"
    data: dict[str, Any] = files["data"]
    return data


def culler_service(values: dict[str, Any]) -> dict[str, Any]:
    """The hub service entry, as Zero to JupyterHub turns `hub.services` into one."""
    return {"name": "raylab-culler", **values["hub"]["services"]["raylab-culler"]}
