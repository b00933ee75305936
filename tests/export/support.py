"""Helpers of the export tests: notebooks made in code, and a fresh environment per project.

The tests run in a network namespace without PyPI, so a "fresh environment" is a new
virtual environment that layers on this one: a `.pth` file adds this environment's
site-packages (where dagster, dagster-ray and ray are installed from raylab's dev extras)
under the new one, and the generated project is installed into the new one alone with
`pip install --no-deps --no-build-isolation -e`. Nothing of raylab is on its path.
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


def read_tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


class FreshEnv:
    """A virtual environment holding only the generated project (see the module doc)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        venv.EnvBuilder(with_pip=False).create(path)
        purelib = Path(
            sysconfig.get_paths(vars={"base": str(path), "platbase": str(path)})["purelib"]
        )
        parent = sysconfig.get_paths()["purelib"]
        (purelib / "_parent_environment.pth").write_text(parent + "\n")
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
        done = self.run("-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "-e", str(project), cwd=project)  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr


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
