"""What the analysis of a notebook produces: kept statements, parameters, and notes.

The code generator and the report read only these: they never look at cells again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from .serve_calls import ServeCall

# "app": a Serve app's assignment, moved to the module's top level (serve_apps.py).
StmtKind = Literal["import", "def", "code", "show", "app"]


@dataclass
class Stmt:
    """One top-level statement the pipeline runs, as source text."""

    cell: int
    line: int  # first line in its cell, 1-based
    kind: StmtKind
    source: str  # a complete top-level statement (for "show": the expression)
    step: str
    binds: frozenset[str] = frozenset()
    loads: frozenset[str] = frozenset()
    name: str | None = None  # the def/class name
    module_level: bool = False  # a def/class that Ray workers import from the module
    inert: bool = True  # a def/class whose definition runs nothing of the notebook's


@dataclass(frozen=True)
class Parameter:
    name: str
    annotation: str  # "int", "list[str]", "str | None"
    value: object  # a literal
    cell: int
    line: int


@dataclass(frozen=True)
class Note:
    """A line of EXPORT.md: what happened to a piece of the notebook, and why."""

    cell: int
    line: int
    written: str
    action: str  # dropped, dependency, changed, parameter, kept as code, metadata
    why: str


@dataclass(frozen=True)
class ServeApp:
    """A Serve app of the notebook, as rayservice.yaml deploys it."""

    cell: int
    line: int
    name: str
    route_prefix: str | None  # None: no HTTP route (handles only)
    variable: str  # the module-level name of the app in notebook.py


@dataclass(frozen=True)
class ServeRefusal:
    """A `serve.run` whose app is not in rayservice.yaml, and why (one line)."""

    cell: int
    line: int
    written: str
    why: str


@dataclass
class Analysis:
    stmts: list[Stmt] = field(default_factory=list)
    params: list[Parameter] = field(default_factory=list)
    requirements: list[str] = field(default_factory=list)
    env_names: list[str] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    undefined: list[str] = field(default_factory=list)  # pyflakes, "cell 4, line 2: ..."
    cells: list[int] = field(default_factory=list)  # the selected cells
    steps: list[str] = field(default_factory=list)  # in order; one step when untagged
    in_order: bool = True  # saved outputs come from a top-to-bottom run
    result_text: str | None = None  # the notebook's saved Out[] of the final shown value
    gpu_cells: list[int] = field(default_factory=list)  # cells asking Ray for num_gpus
    # What the notebook wrote into its environment (env_writes.py): in no file, ever.
    written_values: list[str] = field(default_factory=list)
    # Ray Serve: the calls left out of the steps, the apps for rayservice.yaml, the others.
    serve_calls: list[ServeCall] = field(default_factory=list)
    serve_apps: list[ServeApp] = field(default_factory=list)
    serve_refused: list[ServeRefusal] = field(default_factory=list)
    uses_serve: bool = False  # the kept code imports ray.serve: the project needs ray[serve]

    def note(self, cell: int, line: int, written: str, action: str, why: str) -> None:
        self.notes.append(Note(cell, line, _short(written), action, why))

    def add_requirements(self, requirements: tuple[str, ...]) -> None:
        for r in requirements:
            if r not in self.requirements:
                self.requirements.append(r)

    def add_written_values(self, values: tuple[str, ...] | list[str]) -> None:
        self.written_values += [v for v in values if v and v not in self.written_values]

    def add_env(self, names: tuple[str, ...] | list[str]) -> None:
        for n in names:
            if n not in self.env_names:
                self.env_names.append(n)


def _short(text: str, limit: int = 80) -> str:
    line = " ".join(text.strip().split())
    return line if len(line) <= limit else line[: limit - 1] + "…"
