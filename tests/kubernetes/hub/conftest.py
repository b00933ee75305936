"""One JupyterHub deployment for the whole module: cheap to share, slow to make.

The session's control plane (tests/kubernetes/conftest.py) with its process nodes, the
identities of docs/zero-to-jupyterhub.md (identities.py) and the hub made from that
page's values (deployment.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from processnodes import PROCESS_GPU_TYPE, process_profile

from .deployment import Hub, running_hub
from .documented import culler_service, helm_values, raylab_config
from .identities import identities

USERS = ["alice", "bob", "carol"]
ADMIN = "admin"  # the hub's admin (Hub.admin), raylab's too (admin_users in the doc)
# carol's Role lacks this rule: the fault the sidebar and `up` must name.
CAROL_LACKS = "secrets"


def culled_namespaces(values: dict[str, Any]) -> list[str]:
    command = culler_service(values)["command"]
    return [command[i + 1] for i, arg in enumerate(command) if arg == "--namespace"]


def tests_overlay(values: dict[str, Any]) -> dict[str, Any]:
    """What the tests add to the documented c.Raylab, and why: the process nodes' GPU
    type (so pods really run Ray), and idle times short enough to watch within a test."""
    documented = raylab_config(values)["Raylab"]
    return {
        "Raylab": {
            "gpu_types": {**documented["gpu_types"], PROCESS_GPU_TYPE: process_profile()},
            "idle_suspend_minutes": {PROCESS_GPU_TYPE: 3},
            "idle_warning_minutes": 2.5,
            "cull_interval_seconds": 5,
            "wait_timeout": 300,
        },
        # The journey drives JupyterLab's own commands (window.jupyterapp), as Galata
        # does; no update or news checks (no network here).
        "LabApp": {
            "expose_app_in_browser": True,
            "news_url": None,
            "check_for_updates_class": "jupyterlab.NeverCheckForUpdate",
        },
    }


@pytest.fixture(scope="module")
def hub(
    control_plane: ControlPlane, process_nodes: list[str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Hub]:
    work: Path = tmp_path_factory.mktemp("hub")
    values = helm_values()
    with identities(control_plane, work / "kube") as made:
        kubeconfigs = {
            f"raylab-{u}": str(made.user(u, without=CAROL_LACKS if u == "carol" else None))
            for u in USERS
        }
        kubeconfigs[f"raylab-{ADMIN}"] = str(made.overview_admin(ADMIN))
        culler = str(made.culler(culled_namespaces(values)))
        deployment = Hub(work / "hub", values, tests_overlay(values), kubeconfigs, culler, USERS)
        with running_hub(deployment) as running:
            yield running
