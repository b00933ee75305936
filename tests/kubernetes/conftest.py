"""Fixtures around a real local Kubernetes control plane (harness/controlplane.py).

One control plane per test session (starting it takes tens of seconds). If the
binaries are not cached yet, the session fixture first runs harness/build.sh, which
is slow when cold; CI runs build.sh in a step of its own.

RAYLAB_K8S_KEEP=1 keeps the work dir (etcd data, kubeconfigs, logs) after the
session; it is kept anyway when a test failed, and its path is printed.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s_client

# harness/ is not a package (it also runs as a script): import it from its folder.
sys.path.insert(0, str(Path(__file__).resolve().parent / "harness"))

from controlplane import ControlPlane, ensure_built

from tests.ci import cannot_run

from .kuberay_support import new_namespace

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Everything under tests/kubernetes needs the control plane: `-m "not kubernetes"`
    # deselects it where the binaries cannot be built.
    for item in items:
        if item.path.is_relative_to(HERE):
            item.add_marker(pytest.mark.kubernetes)


@pytest.fixture(scope="session")
def control_plane(request: pytest.FixtureRequest) -> Iterator[ControlPlane]:
    # A cold build takes many minutes: let its progress through pytest's capture.
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled() if capture else contextlib.nullcontext():
        binaries = ensure_built()
    plane = ControlPlane(binaries=binaries)
    plane.start()
    try:
        yield plane
    finally:
        keep = bool(os.environ.get("RAYLAB_K8S_KEEP")) or request.session.testsfailed > 0
        plane.stop(keep_work_dir=keep)
        if keep:
            sys.stderr.write(f"\nKubernetes control plane logs kept in {plane.log_dir}\n")


@pytest.fixture(scope="session")
def admin_kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig("admin")


@pytest.fixture(scope="session")
def alice_kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig("alice")


@pytest.fixture(scope="session")
def bob_kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig("bob")


@pytest.fixture(scope="session")
def admin_api(control_plane: ControlPlane) -> Iterator[k8s_client.ApiClient]:
    with control_plane.api_client("admin") as api:
        yield api


@pytest.fixture(scope="session")
def alice_api(control_plane: ControlPlane) -> Iterator[k8s_client.ApiClient]:
    with control_plane.api_client("alice") as api:
        yield api


@pytest.fixture(scope="session")
def bob_api(control_plane: ControlPlane) -> Iterator[k8s_client.ApiClient]:
    with control_plane.api_client("bob") as api:
        yield api


@pytest.fixture
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    """A fresh namespace (deleted afterwards) whose default ServiceAccount exists.

    Pods are refused until the controller-manager has made that ServiceAccount: waiting
    here keeps tests from racing it.
    """
    with new_namespace(admin_api, "t") as name:
        yield name


@pytest.fixture(scope="session")
def process_nodes(control_plane: ControlPlane) -> list[str]:
    """The nodes whose pods really run (harness/processnodes.py)."""
    if control_plane.process_nodes_unavailable is not None:
        cannot_run(f"no process nodes here: {control_plane.process_nodes_unavailable}")
    return control_plane.process_nodes
