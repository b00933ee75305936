"""Where raylab's pages are under the Jupyter server's base URL, written once: the routes
(extension.py), the clusters' JSON, the proxy and a kernel's `dashboard` link use these.
Pure: a kernel imports it without Jupyter's server."""

from __future__ import annotations

PREFIX = "raylab"


def dashboard_path(name: str) -> str:
    """A cluster's Ray dashboard behind the server's proxy, relative to the base URL."""
    return f"{PREFIX}/clusters/{name}/dashboard/"
