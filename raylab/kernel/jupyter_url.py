"""Where this kernel's Jupyter server is, for links through it (`serve` prints apps' URLs)."""

from __future__ import annotations

import contextlib
import os


def jupyter_base_url() -> str:
    """The server's base URL: JupyterHub's prefix for this server (a path: the browser's
    origin is the hub's), else the one Jupyter server running here ('' when there are
    none or several: links are then relative to the server's root)."""
    prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX")
    if prefix:
        return prefix
    with contextlib.suppress(Exception):  # a damaged runtime file is no reason to fail
        from jupyter_server.serverapp import list_running_servers

        servers = list(list_running_servers())
        if len(servers) == 1:
            return str(servers[0].get("url") or "")
    return ""
