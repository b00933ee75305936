"""What an exported project depends on, in one place: its pyproject.toml, its EXPORT.md
and the tests' local wheelhouse (tests/export/wheelhouse.py) all read these."""

from __future__ import annotations

# dagster-ray 0.4.8 binds each RayJob to its Ray Client session with
# ApiClient.call_api(response_type=...), which the kubernetes client renamed in 36: a
# step then fails right after connecting (tests/kubernetes/test_export_e2e.py found it).
PIPELINE = ("dagster==1.13.*", "dagster-ray[kuberay]==0.4.8", "kubernetes>=31,<36")
TESTS = ("pytest>=8", "ipython>=8")  # the project's `test` extra
BUILD = ("hatchling>=1.27",)  # its build backend


def ray_requirement(ray_version: str, *, serve: bool = False) -> str:
    """The kernel's exact Ray: Ray Client needs the driver and the cluster to match. With
    Serve when the notebook imports it (notebook.py defines its deployments and apps)."""
    return f"ray[data,client{',serve' if serve else ''}]=={ray_version}"


def every_project(ray_version: str) -> tuple[str, ...]:
    """What every exported project installs, its tests included."""
    return (*PIPELINE, *TESTS, ray_requirement(ray_version))
