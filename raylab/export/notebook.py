"""Reading a notebook's cells and choosing which ones the pipeline gets.

Cells are numbered from 1 over all cells (markdown included), as a reader counts them
top to bottom in JupyterLab, so "cell 4" in a report is the fourth cell on screen.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

from ..errors import NotFound
from .errors import ExportError

EXPORT_TAG = "export"
PARAMETERS_TAG = "parameters"  # papermill's convention, also used by dagstermill and Ploomber
SKIP_TAGS = frozenset({"no-export", "skip-export"})
STEP_PREFIX = "step:"
CellMode = Literal["auto", "tagged", "all"]
_STEP_NAME = re.compile(r"[^a-z0-9_]+")


@dataclass(frozen=True)
class Cell:
    number: int  # 1-based position among all cells
    source: str
    tags: frozenset[str]
    execution_count: int | None
    outputs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def step(self) -> str | None:
        for tag in sorted(self.tags):
            if tag.startswith(STEP_PREFIX) and tag[len(STEP_PREFIX) :].strip():
                return step_name(tag[len(STEP_PREFIX) :])
        return None

    @property
    def is_parameters(self) -> bool:
        return PARAMETERS_TAG in self.tags

    def result_text(self) -> str | None:
        """The text of the value this cell showed (its Out[n]), if it was run and saved."""
        for out in self.outputs:
            if out.get("output_type") == "execute_result":
                text = out.get("data", {}).get("text/plain")
                if isinstance(text, list):
                    text = "".join(text)
                return text if isinstance(text, str) else None
        return None


def step_name(raw: str) -> str:
    name = _STEP_NAME.sub("_", raw.strip().lower()).strip("_") or "step"
    return f"step_{name}" if name[0].isdigit() else name


def read_cells(path: Path) -> list[Cell]:
    """The notebook's code cells (with their numbers among all cells)."""
    import nbformat

    if not path.is_file():
        raise NotFound(f"no notebook at {path}", detail="give the path of an .ipynb file")
    try:
        nb = cast(Any, nbformat).read(str(path), as_version=4)
    except Exception as exc:  # nbformat raises several unrelated types for a bad file
        raise ExportError(
            f"{path.name} is not a readable notebook: {exc}",
            detail="open it in JupyterLab and save it again",
        ) from None
    cells = []
    for number, cell in enumerate(nb.cells, start=1):
        if cell.get("cell_type") != "code":
            continue
        tags = cell.get("metadata", {}).get("tags") or []
        cells.append(
            Cell(
                number=number,
                source=str(cell.get("source", "")),
                tags=frozenset(str(t) for t in tags),
                execution_count=cell.get("execution_count"),
                outputs=[dict(o) for o in cell.get("outputs", [])],
            )
        )
    return cells


def select_cells(cells: Sequence[Cell], mode: CellMode) -> list[Cell]:
    """The cells the pipeline runs, in notebook order.

    `tagged`: cells tagged `export` or `step:NAME`, and the `parameters` cell. `all`: every
    code cell except those tagged `no-export`. `auto`: `tagged` when any cell carries such a
    tag, else `all`.
    """
    nonempty = [c for c in cells if c.source.strip()]
    if not nonempty:
        raise ExportError(
            "the notebook has no code cells to export",
            detail="write the experiment's code in code cells, then export again",
        )

    def tagged(c: Cell) -> bool:
        return EXPORT_TAG in c.tags or c.step is not None or c.is_parameters

    marked = [c for c in nonempty if EXPORT_TAG in c.tags or c.step is not None]
    if mode == "tagged" or (mode == "auto" and marked):
        if not marked:
            raise ExportError(
                "no cell is tagged 'export' or 'step:NAME'",
                detail="tag the cells to export (View > Cell Toolbar > Tags), or use --cells all",
            )
        return [c for c in nonempty if tagged(c)]
    return [c for c in nonempty if not (c.tags & SKIP_TAGS)]


def ran_in_order(cells: Sequence[Cell]) -> bool:
    """True when the saved outputs come from running these cells top to bottom."""
    counts = [c.execution_count for c in cells if c.execution_count is not None]
    return all(a < b for a, b in itertools.pairwise(counts))
