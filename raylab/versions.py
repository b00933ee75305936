"""The Ray and Python versions of this kernel and of a running cluster, compared before
anything connects.

Ray Client refuses a kernel whose Ray version or Python minor differs from the
cluster's, with an error that does not say what to do; we compare first. Backends,
manifests and the export read the kernel's versions here, without importing the
kernel's connection module.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from importlib.metadata import version

from . import auth
from .errors import VersionMismatch
from .model import ClusterInfo


def kernel_versions() -> tuple[str, str]:
    return version("ray"), f"{sys.version_info.major}.{sys.version_info.minor}"


def default_image(ray_version: str, python_version: str) -> str:
    """The rayproject/ray image for a Ray version and Python minor (e.g. 2.60.0-py311)."""
    return f"rayproject/ray:{ray_version}-py{python_version.replace('.', '')}"


def running_versions(
    dashboard: str | None, token: str | None = None, timeout: float = 5.0
) -> tuple[str, str] | None:
    """(Ray version, Python minor) of the running head, from its dashboard.

    The cluster metadata that Ray Client itself compares on connect, as the head wrote
    it at start: what actually runs, whatever raylab's record (an image tag) says.
    None when the dashboard cannot say (not up, or an older Ray without the route).
    """
    if not dashboard:
        return None
    url = dashboard.rstrip("/") + "/api/v0/cluster_metadata"
    # The cluster's token: its dashboard refuses anyone else (auth.py).
    headers = {"Authorization": auth.bearer(token)} if token else {}
    try:
        request = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = json.load(response).get("data") or {}
    except (OSError, ValueError, AttributeError):
        return None
    ray_version = data.get("rayVersion") or data.get("ray_version")
    python = str(data.get("pythonVersion") or data.get("python_version") or "")
    if not ray_version or python.count(".") < 1:
        return None
    return str(ray_version), ".".join(python.split(".")[:2])


def check_versions(info: ClusterInfo, running: tuple[str, str] | None = None) -> None:
    """Refuse a cluster whose Ray or Python minor differs from this kernel's.

    `running` (from `running_versions`) is what the head runs; without it, raylab's
    record of the cluster (its image's tag) is all there is to go on."""
    ray_here, py_here = kernel_versions()
    ray_there, py_there = running or (info.ray_version, info.python_version)
    if (ray_there is None or ray_there == ray_here) and (py_there is None or py_there == py_here):
        return
    py_tag = (py_there or py_here).replace(".", "")
    raise VersionMismatch(
        f"cluster {info.name!r} runs Ray {ray_there} on Python {py_there}, "
        f"this kernel has Ray {ray_here} on Python {py_here}; Ray Client needs both to match",
        detail=(
            f"install Ray {ray_there} in the kernel's environment "
            f"(pip install 'ray[client]=={ray_there}') with a Python {py_there} kernel, "
            f"or create the cluster with --image {default_image(ray_here, py_here)}"
            if ray_there
            else f"use a Python {py_there} kernel (image tag py{py_tag})"
        ),
    )
