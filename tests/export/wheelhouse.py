"""Fill the local wheelhouse that exported projects are installed from in the tests.

Run by `make` while the network is there (the tests' namespace reaches no index):
`python tests/export/wheelhouse.py DIR`. It holds what an exported project asks for
(raylab/export/dependencies.py, the kernel's Ray) and the test notebooks' own `%pip`
lines, read by the exporter's own parser, and nothing else: a dependency a project uses
without declaring it fails its install or its import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

from raylab.export import dependencies
from raylab.export.magic_lines import decide

NOTEBOOKS = Path(__file__).resolve().parent / "notebooks"


def notebook_requirements() -> list[str]:
    found: list[str] = []
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            for line in "".join(cell["source"]).splitlines():
                line = line.strip()
                if line.startswith("%pip "):
                    found += decide("run_line_magic", ["pip", line[5:]]).requirements
                elif line.startswith("!"):
                    found += decide("system", [line[1:]]).requirements
    return found


# What hatchling asks for to build a project in editable mode (`pip install -e`).
EDITABLE_BUILD = ("editables~=0.3",)


def requirements() -> list[str]:
    return [*dependencies.BUILD, *EDITABLE_BUILD, *dependencies.every_project(version("ray")),
            *notebook_requirements()]  # fmt: skip


def main(folder: str) -> None:
    wanted = requirements()
    done = Path(folder) / ".complete"
    if done.is_file() and done.read_text().splitlines() == wanted:
        return
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:",
         "-d", folder, *wanted],
        check=True,
    )  # fmt: skip
    done.write_text("\n".join(wanted) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
