"""Attack: user-controlled text pasted into the exported project's code runs on import.

A notebook's file name went verbatim into triple-quoted docstrings of the generated
package, so `x\"\"\";open("PWNED","w");\"\"\".ipynb` ran its code whenever the pipeline was
imported (`dagster dev`, its tests, a Ray worker). Here each such string (the file name,
with a quote, a newline, a backslash, an emoji; the cluster's description; parameters,
environment variable names, step tags) is exported for real, and the generated package
is imported by a real Python (the test environment's, which has Dagster): the import
works, it creates no file, every docstring says the text as it was written, and the
pyproject.toml is valid TOML.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

from raylab.config import Settings
from raylab.export import export_notebook
from tests.export.support import Cell, make_notebook

SETTINGS = Settings.from_config()
PAYLOAD = '__import__("os").mkdir("PWNED")'  # no comma: it also goes into a tag
HOSTILE_NAMES = [
    f'x""";{PAYLOAD};""".ipynb',
    f'y\n""";{PAYLOAD}#\n.ipynb',
    f"z\\{PAYLOAD}\\.ipynb",
    f"w\"\"\"\x7f\t😀;{PAYLOAD};'''.ipynb",
]


def export(folder: Path, filename: str, cells: list[Cell], **kw: Any) -> tuple[str, Path]:
    folder.mkdir()
    nb = make_notebook(folder / filename, cells)
    result = export_notebook(nb, settings=SETTINGS, out_dir=folder / "project", **kw)
    return result.name, result.out_dir


def import_packages(projects: list[tuple[str, Path]], scratch: Path) -> dict[str, Any]:
    """Import each generated package's modules in a fresh interpreter whose working
    directory is `scratch`; their docstrings, by module."""
    modules = [f"{pkg}.{m}" for pkg, _ in projects for m in ("definitions", "cluster")]
    code = (
        "import importlib, json, sys\n"
        f"names = {modules!r}\n"
        "mods = [importlib.import_module(n) for n in names]\n"
        "mods += [importlib.import_module(n.split('.')[0]) for n in names]\n"
        "mods += [importlib.import_module(n.split('.')[0] + '.notebook') for n in names]\n"
        "json.dump({m.__name__: m.__doc__ for m in mods}, sys.stdout)\n"
    )
    path = ":".join(str(out) for _, out in projects)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=scratch, capture_output=True, text=True,
        timeout=300, env={"PYTHONPATH": path, "RAY_USAGE_STATS_ENABLED": "0", "HOME": str(scratch)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    docs: dict[str, Any] = json.loads(done.stdout)
    return docs


def test_a_notebooks_file_name_never_becomes_code(tmp_path: Path) -> None:
    projects = [
        export(tmp_path / f"nb{i}", name, ["n = 2\nn * 21"]) for i, name in enumerate(HOSTILE_NAMES)
    ]
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    docs = import_packages(projects, scratch)
    assert list(scratch.iterdir()) == []  # no PWNED: nothing ran
    for (pkg, out), name in zip(projects, HOSTILE_NAMES, strict=True):
        assert not list(out.rglob("PWNED"))
        for module in (pkg, f"{pkg}.definitions", f"{pkg}.notebook"):
            assert name in docs[module], (module, docs[module])
        pyproject = tomllib.loads((out / "pyproject.toml").read_text())
        assert pyproject["project"]["description"].endswith(f"from {name}")
        for py in out.rglob("*.py"):
            compile(py.read_text(), str(py), "exec")


def test_other_user_text_never_becomes_code(tmp_path: Path) -> None:
    """The cluster's description, parameter values and names, environment variable names
    and step tags: each written to break out of a string, a docstring or a comment."""
    cells: list[Cell] = [
        (
            f"big = 1e400\ntext = '\"\"\"\\n{PAYLOAD}\\n#'\nπ = 3.5\nback = 'a\\\\'",
            ["parameters"],
        ),
        (
            f'import os\nkey = os.environ.get(\'A""";{PAYLOAD};#\')\nvalue = big',
            [f'step:x""";{PAYLOAD}'],
        ),
        (f'# a comment """; {PAYLOAD}\ntext + str(π) + back', ["step:later"]),
    ]
    source = f'cluster "x""";{PAYLOAD};"""\n{PAYLOAD}'
    project = export(tmp_path / "nb", "nb.ipynb", cells, cluster_source=source)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    docs = import_packages([project], scratch)
    assert list(scratch.iterdir()) == []
    assert source in docs["nb.cluster"]
