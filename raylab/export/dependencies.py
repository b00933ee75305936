"""What an exported project depends on, in one place: its pyproject.toml, its EXPORT.md
and the tests' local wheelhouse (tests/export/wheelhouse.py) all read these."""

from __future__ import annotations

PIPELINE = ("dagster==1.13.*", "dagster-ray[kuberay]==0.4.8")
TESTS = ("pytest>=8", "ipython>=8")  # the project's `test` extra
BUILD = ("hatchling>=1.27",)  # its build backend


def ray_requirement(ray_version: str) -> str:
    """The kernel's exact Ray: Ray Client needs the driver and the cluster to match."""
    return f"ray[data,client]=={ray_version}"


def every_project(ray_version: str) -> tuple[str, ...]:
    """What every exported project installs, its tests included."""
    return (*PIPELINE, *TESTS, ray_requirement(ray_version))
