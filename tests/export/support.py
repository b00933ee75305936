"""Helpers of the export tests: notebooks made in code, and a fresh environment per project.

A "fresh environment" holds nothing of the test environment (not raylab, not its
dependencies): a new virtual environment into which pip installs the generated project
and what its own pyproject.toml asks for, from the local wheelhouse that `make` fills
while the network is there (tests/export/wheelhouse.py; the tests' namespace reaches no
index). So a dependency a project uses without declaring it fails. The pipeline
dependencies every project declares (dagster, dagster-ray, the kernel's Ray, pytest) are
installed once per session into a base environment that each project's one layers on,
which saves ~50 s a project; what a project adds (its notebook's `%pip` lines) is
installed into its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import venv
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"
Cell = str | tuple[str, Sequence[str]]  # source, or (source, tags); "# md: ..." is markdown


def make_notebook(path: Path, cells: Sequence[Cell]) -> Path:
    nb = new_notebook()
    for cell in cells:
        source, tags = (cell, ()) if isinstance(cell, str) else cell
        if source.startswith("# md:"):
            nb.cells.append(new_markdown_cell(source[5:].strip()))
        else:
            nb.cells.append(new_code_cell(source, metadata={"tags": list(tags)} if tags else {}))
    nbformat.write(nb, str(path))
    return path


def last_shown(nb: Any) -> str:
    """What the executed notebook showed last (its last Out[])."""
    results = [
        o["data"]["text/plain"]
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "execute_result"
    ]
    assert results, "the notebook showed nothing"
    return str(results[-1])


def read_tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / ".cache" / "wheelhouse"


def _purelib(env: Path) -> Path:
    return Path(sysconfig.get_paths(vars={"base": str(env), "platbase": str(env)})["purelib"])


def _pip(python: Path, *args: str) -> None:
    if not (WHEELHOUSE / ".complete").is_file():
        raise AssertionError(f"no wheelhouse at {WHEELHOUSE}: `make test` (or `python "
                             "tests/export/wheelhouse.py .cache/wheelhouse`) fills it")  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
         "--no-index", "--find-links", str(WHEELHOUSE), *args],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def make_base(path: Path) -> Path:
    """The environment every exported project's one layers on (see the module doc)."""
    from importlib.metadata import version

    from raylab.export import dependencies

    venv.EnvBuilder(with_pip=False).create(path)
    _pip(path / "bin" / "python", *dependencies.every_project(version("ray")))
    return path


class FreshEnv:
    """A virtual environment with the generated project alone, on `base` (the module doc)."""

    def __init__(self, path: Path, base: Path) -> None:
        self.path = path
        venv.EnvBuilder(with_pip=False).create(path)
        (_purelib(path) / "_pipeline_base.pth").write_text(str(_purelib(base)) + "\n")
        self.python = path / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAY_ADDRESS")}
        env["RAY_USAGE_STATS_ENABLED"] = "0"
        env.update(extra)
        return env

    def run(self, *args: str, cwd: Path, timeout: float = 900, **env: str) -> Any:
        return subprocess.run(
            [str(self.python), *args], cwd=cwd, env=self.env(**env), capture_output=True,
            text=True, timeout=timeout,
        )  # fmt: skip

    def install(self, project: Path) -> None:
        """`pip install -e 'project[test]'` as its README says, from the wheelhouse."""
        _pip(self.python, "-e", f"{project}[test]")


def python_has(module: str) -> bool:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True)
    return done.returncode == 0


class Lines:
    """What the export verb tells a user, collected (its `out`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.warnings: list[str] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def warn(self, text: str) -> None:
        self.warnings.append(text)
