"""Real notebooks -> Dagster projects, each checked the way a user would check it.

For every notebook under notebooks/: it runs top to bottom in a real kernel (nbclient),
is exported with the `export` verb, and the project is installed into a fresh virtual
environment (see support.py), where `dagster definitions validate` passes and the
project's own tests pass, among them a materialization on Ray whose value must equal
what the notebook showed when it ran top to bottom.

One local raylab cluster (`exp-nb`: a head and a worker with 2 logical GPUs) serves the
notebooks that `%raycluster up` it and the generated tests' runs (RAY_ADDRESS), which
reach it through Ray Client as production runs reach theirs: its workers can import the
notebook's functions only because the pipeline ships them (runtime_env py_modules).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from raylab.backends import make_backend
from raylab.config import Settings
from raylab.export.verb import run_export
from raylab.identity import current_user
from raylab.model import ClusterInfo
from raylab.service import ClusterService

from .support import NOTEBOOKS, FreshEnv, Lines, last_shown

CLUSTER = "exp-nb"  # the name the notebooks' `%raycluster up` uses


@dataclass(frozen=True)
class Case:
    notebook: str
    package: str
    on_cluster: bool = True  # export with --cluster exp-nb and run the tests on it
    env: tuple[tuple[str, str], ...] = ()  # the deployment's environment
    saved_out_of_order: bool = False
    shows_a_written_value: bool = False  # its Out[] shows a value it put into os.environ


CASES = [
    Case("tasks", "tasks"),
    Case("gpu_train", "gpu_train", env=(("RUN_MODE", "offline"),), shows_a_written_value=True),
    Case("ray_init", "ray_init", on_cluster=False),
    Case("out_of_order", "out_of_order", saved_out_of_order=True),
    Case("steps", "steps"),
]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raylab.cli", *args], capture_output=True,
                          text=True, timeout=600)  # fmt: skip


def service() -> ClusterService:
    settings = Settings.load()
    return ClusterService(make_backend("local", settings), settings, current_user())


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterInfo]:
    made = cli("up", "--name", CLUSTER, "--gpus", "2", "--workers", "1", "--cpus", "2",
               "--memory", "2Gi", "--backend", "local")  # fmt: skip
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        yield service().get(CLUSTER)
    finally:
        cli("down", CLUSTER, "--backend", "local")


def execute(path: Path) -> Any:
    """Run the notebook top to bottom in a real kernel; returns the executed notebook."""
    nb = nbformat.read(str(path), as_version=4)
    # A bare ray.init() starts a Ray of its own instead of joining whatever Ray this
    # machine runs (as it would with the default address "auto").
    env = {**os.environ, "RAY_ADDRESS": "local"}
    client = NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}})  # fmt: skip
    client.execute(env=env)
    return nb


@pytest.mark.parametrize("case", CASES, ids=[c.notebook for c in CASES])
def test_notebook_becomes_a_working_pipeline(
    case: Case, cluster: ClusterInfo, tmp_path: Path, pipeline_base: Path
) -> None:
    original = tmp_path / f"{case.notebook}.ipynb"
    shutil.copy(NOTEBOOKS / original.name, original)
    executed = execute(original)
    expected = last_shown(executed)
    if not case.saved_out_of_order:
        nbformat.write(executed, str(original))  # export what the user saw, outputs and all

    out = Lines()
    args = argparse.Namespace(notebook=str(original), name=None, schedule=None, cells=None,
                              out=None, force=False,
                              cluster=CLUSTER if case.on_cluster else None)  # fmt: skip
    result = run_export(args, connected_cluster_info=None, out=out, settings=Settings.load(),
                        lookup=service().get)  # fmt: skip
    project = tmp_path / f"{case.package}_pipeline"
    assert result.out_dir == project
    assert out.lines[0].startswith(f"Exported {original.name} to {project}")
    assert result.undefined_names == []
    notebook_result = project / "tests" / "notebook_result.txt"
    if case.saved_out_of_order:
        assert any("run out of order" in w for w in out.warnings)
        assert not notebook_result.exists()  # its saved outputs are not a top-to-bottom run
        notebook_result.write_text(expected + "\n")  # what the user would confirm
    elif case.shows_a_written_value:
        # `%env RUN_MODE=offline` may as well be a secret: the Out[] that shows it is not
        # copied into the project; EXPORT.md says so, and the user writes what to expect.
        assert not notebook_result.exists()
        assert (
            "shows a value the notebook wrote into its environment"
            in (project / "EXPORT.md").read_text()
        )
        notebook_result.write_text(expected + "\n")
    else:
        assert notebook_result.read_text() == expected + "\n"
    code = "".join(p.read_text() for p in project.rglob("*.py"))
    assert "get_ipython" not in code
    assert "ray.init" not in (project / case.package / "notebook.py").read_text()

    fresh = FreshEnv(tmp_path / "venv", pipeline_base)
    fresh.install(project)
    validated = fresh.run("-m", "dagster", "definitions", "validate", "-f",
                          f"{case.package}/definitions.py", cwd=project)  # fmt: skip
    assert validated.returncode == 0, validated.stdout + validated.stderr

    env = dict(case.env)
    if case.on_cluster:
        assert cluster.endpoints.client
        env["RAY_ADDRESS"] = cluster.endpoints.client
        # The cluster checks its token: what `raylab env` prints gives it to the run.
        shell = cli("env", CLUSTER, "--backend", "local").stdout
        env.update(ln.removeprefix("export ").split("=", 1) for ln in shell.splitlines()
                   if ln.startswith("export RAY_AUTH"))  # fmt: skip
        assert env["RAY_AUTH_MODE"] == "token"
    tests = fresh.run("-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", cwd=project, **env)
    report = tests.stdout + tests.stderr
    assert tests.returncode == 0, report
    assert "PASSED tests/test_pipeline.py::test_local_materialization" in report
    assert re.search(r"\b5 passed", report), report


def test_gpu_notebook_exports_its_gpus_and_environment(
    cluster: ClusterInfo, tmp_path: Path
) -> None:
    """The manifest half of the GPU case, without running anything."""
    from raylab.export import export_notebook

    result = export_notebook(NOTEBOOKS / "gpu_train.ipynb", out_dir=tmp_path / "p",
                             cluster=cluster, settings=Settings.load())  # fmt: skip
    snapshot = json.loads((result.out_dir / "tests/raycluster.snapshot.json").read_text())
    (group,) = snapshot["workerGroupSpecs"]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    assert group["replicas"] == 1
    cluster_py = (result.out_dir / "gpu_train/cluster.py").read_text()
    assert 'ENV_VARS = ["RUN_MODE"]' in cluster_py
    assert "offline" not in cluster_py
