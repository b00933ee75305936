"""The kernel/cluster version check that runs before Ray Client connects."""

from __future__ import annotations

import pytest

from raylab.connect import check_versions, kernel_versions
from raylab.errors import VersionMismatch
from raylab.model import ClusterInfo, Phase
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec


def info(ray_version: str, python_version: str) -> ClusterInfo:
    spec = ClusterSpec.from_mapping({"name": "exp"}, Profiles())
    return ClusterInfo(
        name="exp", owner="me", backend="local", phase=Phase.READY, spec=spec,
        ray_version=ray_version, python_version=python_version,
    )  # fmt: skip


def test_same_versions_pass() -> None:
    check_versions(info(*kernel_versions()))


def test_ray_mismatch_names_both_versions_and_the_fix() -> None:
    ray_here, py_here = kernel_versions()
    with pytest.raises(VersionMismatch) as err:
        check_versions(info("2.9.3", py_here))
    assert f"runs Ray 2.9.3 on Python {py_here}" in err.value.message
    assert f"this kernel has Ray {ray_here}" in err.value.message
    tag = py_here.replace(".", "")
    assert f"--image rayproject/ray:{ray_here}-py{tag}" in (err.value.detail or "")
    assert "pip install 'ray[client]==2.9.3'" in (err.value.detail or "")


def test_python_mismatch() -> None:
    ray_here, _ = kernel_versions()
    with pytest.raises(VersionMismatch, match=r"on Python 3\.9"):
        check_versions(info(ray_here, "3.9"))
