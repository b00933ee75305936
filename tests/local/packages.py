"""Private packages made in a test: a project, its wheel (built by pip, offline), and
installs that only this process (the "kernel") sees.

No index is reachable in the tests' network namespace, so everything is built and
installed from local files with --no-index and --no-build-isolation (hatchling is in
the test environment). The installs go to folders of their own that this process adds
to its path, never into the shared virtual environment: the cluster's workers, which
run the same Python, then see none of them unless raylab ships them.
"""

from __future__ import annotations

import site
import subprocess
import sys
import sysconfig
from pathlib import Path


def make_project(root: Path, name: str, version: str, body: str) -> Path:
    """A hatchling project with one package `name` whose __init__ is `body`."""
    project = root / f"{name}-{version}-src"
    package = project / "src" / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(body)
    (project / "pyproject.toml").write_text(
        f"""[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "{name}"
version = "{version}"

[tool.hatch.build.targets.wheel]
packages = ["src/{name}"]

[tool.hatch.build]
# `pip install -e`: a .pth file that puts src/ on the path (no `editables` needed).
dev-mode-dirs = ["src"]
"""
    )
    return project


def pip(*args: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pip", *args, "--no-index", "--no-build-isolation", "-q"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def build_wheel(project: Path, out: Path) -> Path:
    pip("wheel", "--no-deps", "-w", str(out), str(project))
    name = project.name.rsplit("-", 2)[0]
    (wheel,) = out.glob(f"{name}-*.whl")
    return wheel


def install_wheel(wheel: Path, target: Path) -> Path:
    """Install into `target` (a folder of its own) and put it on this process's path."""
    pip("install", "--no-deps", "--target", str(target), str(wheel))
    site.addsitedir(str(target))
    return target


def install_editable(project: Path, prefix: Path) -> Path:
    """`pip install -e` into a prefix of its own; its site folder (with the .pth that
    points at the project) goes on this process's path."""
    pip("install", "--no-deps", "--prefix", str(prefix), "-e", str(project))
    purelib = Path(
        sysconfig.get_paths(vars={"base": str(prefix), "platbase": str(prefix)})["purelib"]
    )
    site.addsitedir(str(purelib))
    return purelib
