"""Notebook cells -> the statements a pipeline runs, with a note for everything else.

Python is read with `ast` (never regexes); magics are first turned into Python by
IPython's own `TransformerManager`, so they can be recognised exactly and left out.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Sequence

from .cleaner import Cleaner, Names
from .errors import ExportError
from .model import Analysis, Parameter, Stmt
from .notebook import Cell, ran_in_order
from .params import parameter_of
from .scope import binds_and_loads, env_reads, is_inert, place_definitions
from .serve_apps import resolve_apps
from .serve_calls import ServeAliases, imports_serve

# Cell magics whose body is Python run in the notebook's namespace: the body is kept.
_PYTHON_CELL_MAGICS = frozenset({"time", "capture", "prun"})
_RUNTIME_PREFIXES = ("RAY_", "OMP_", "NCCL_")
_RUNTIME_NAMES = frozenset(
    {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES",
     "HIP_VISIBLE_DEVICES", "PATH", "HOME", "USER", "PWD", "HOSTNAME", "PYTHONPATH",
     "LD_LIBRARY_PATH", "JPY_SESSION_NAME"}
)  # fmt: skip


def _first_line(node: ast.stmt) -> int:
    """A decorated def starts at its first decorator (its `lineno` is the `def` line)."""
    decorators: list[ast.expr] = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _python_of(cell: Cell, a: Analysis) -> tuple[str, int] | None:
    """The cell as Python (magics as get_ipython() calls) and the lines above it."""
    transformer = importlib.import_module("IPython.core.inputtransformer2")  # untyped

    source = cell.source
    first, _, body = source.lstrip("\n").partition("\n")
    if first.startswith("%%"):
        magic = first[2:].split(None, 1)[0] if first[2:].strip() else ""
        skipped = len(source) - len(source.lstrip("\n")) + 1
        if magic == "timeit":
            a.note(cell.number, 1, first, "dropped", "timing only (timeit runs the cell in a "
                   "namespace of its own)")  # fmt: skip
            return None
        if magic == "raycluster" and first[2:].split()[1:2] == ["job"]:
            # A cell the notebook ran as a Ray Job: the pipeline's step runs the same code
            # on the pipeline's cluster, as a step runs any cell.
            a.note(cell.number, 1, first, "changed", "%%raycluster job dropped: the step "
                   "runs its body on the pipeline's cluster")  # fmt: skip
        elif magic not in _PYTHON_CELL_MAGICS:
            raise ExportError(
                f"cell {cell.number} is a %%{magic} cell, whose body is not Python; "
                "a pipeline cannot run it",
                detail="rewrite it in Python, tag it no-export, or leave it out with "
                "--cells tagged",
            )
        else:
            a.note(cell.number, 1, first, "changed", f"%%{magic} dropped, its body kept")
        source, offset = body, skipped
    else:
        offset = 0
    python: str = transformer.TransformerManager().transform_cell(source)
    return python, offset


def _segment(python: str, lines: list[str], node: ast.stmt, siblings: list[ast.stmt]) -> str:
    """The statement's own text, comments included when it has its lines to itself."""
    first = _first_line(node)
    shared = any(
        s is not node and _first_line(s) <= (node.end_lineno or node.lineno) and
        (s.end_lineno or s.lineno) >= first for s in siblings
    )  # fmt: skip
    if shared:
        return ast.get_source_segment(python, node) or ast.unparse(node)
    start = _first_line(node) - 1
    # Comment lines right above the statement belong to it.
    while start > 0 and lines[start - 1].lstrip().startswith("#"):
        start -= 1
    return "".join(lines[start : node.end_lineno]).rstrip("\n")


def analyze(cells: Sequence[Cell], steps: Sequence[str]) -> Analysis:
    """Read the selected cells; `steps[i]` is the asset that cell i belongs to."""
    a = Analysis(cells=[c.number for c in cells], in_order=ran_in_order(cells))
    for step in steps:
        if step not in a.steps:
            a.steps.append(step)
    names = Names()
    timeline: list[tuple[int, int, str]] = []  # (cell, line, source) in notebook order
    result_cell: Cell | None = None
    for cell, step in zip(cells, steps, strict=True):
        converted = _python_of(cell, a)
        if converted is None:
            continue
        python, offset = converted
        try:
            tree = ast.parse(python)
        except SyntaxError as exc:
            raise ExportError(
                f"cell {cell.number}, line {(exc.lineno or 1) + offset}: {exc.msg}",
                detail="fix the cell (it does not run in the notebook either), then export again",
            ) from None
        lines = python.splitlines(keepends=True)
        silent = python.rstrip().endswith(";")  # a trailing ; hides the cell's Out[]
        cleaner = Cleaner(names, a, cell.number, offset)
        for i, node in enumerate(tree.body):
            removed = cleaner.removed
            kept = cleaner.statement(node)
            last = i == len(tree.body) - 1 and not silent
            for k in kept:
                original = kept == [node] and cleaner.removed == removed
                text = _segment(python, lines, node, tree.body) if original else ast.unparse(k)
                if isinstance(k, ast.Expr):
                    expr = ast.get_source_segment(python, k.value) if original else None
                    text_of_value = expr or ast.unparse(k.value)
                else:
                    text_of_value = ""
                if kept == [node] and cleaner.removed != removed:
                    a.note(cell.number, node.lineno + offset, text.splitlines()[0], "changed",
                           "rewritten without the lines noted above (its comments were not "
                           "kept)")  # fmt: skip
                params = len(a.params)
                stmt = _classify(k, text, text_of_value, cell, step, offset,
                                 last and k is kept[-1], a)  # fmt: skip
                if len(a.params) > params:  # a parameter: bound here, top to bottom
                    p = a.params[-1]
                    timeline.append((p.cell, p.line, f"{p.name} = {p.value!r}"))
                if stmt is None:
                    continue
                a.stmts.append(stmt)
                timeline.append((cell.number, k.lineno + offset, stmt.source))
                if stmt.kind == "show":
                    result_cell = cell
    if not a.stmts and not a.params:
        raise ExportError(
            "nothing to export: every selected cell is a magic, a shell command or display",
            detail="EXPORT.md would be empty; export a notebook whose cells compute something",
        )
    if result_cell is not None and a.in_order:
        a.result_text = result_cell.result_text()
        if a.result_text is not None and _shows_a_written_value(a.result_text, a):
            a.result_text = None
            why = "shows a value the notebook wrote into its environment; not kept as the "
            a.note(result_cell.number, 1, "Out[]", "dropped", why + "tests' expected result")
    a.notes.sort(key=lambda n: (n.cell, n.line))
    _finish(a, timeline, names.serve)
    return a


def _shows_a_written_value(text: str, a: Analysis) -> bool:
    """Whether the saved output shows a value written into the environment (one of at
    least 4 characters: "0" or "1" would match any output)."""
    return any(len(v) >= 4 and v in text for v in a.written_values)


def _classify(node: ast.stmt, source: str, value: str, cell: Cell, step: str, offset: int,
              last: bool, a: Analysis) -> Stmt | None:  # fmt: skip
    line = _first_line(node) + offset
    if isinstance(node, ast.Import | ast.ImportFrom):
        return Stmt(cell.number, line, "import", source, step)
    if isinstance(node, ast.Global):
        a.note(cell.number, line, source, "dropped", "has no effect at the top level")
        return None
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return Stmt(cell.number, line, "def", source, step, name=node.name, inert=is_inert(node))
    if cell.is_parameters:
        param = parameter_of(node, cell.number, line)
        if isinstance(param, Parameter):
            if any(p.name == param.name for p in a.params):
                a.params = [p for p in a.params if p.name != param.name]
            a.params.append(param)
            a.note(cell.number, line, source, "parameter",
                   f"config field {param.name}: {param.annotation} = {param.value!r}")  # fmt: skip
            return None
        if param:
            a.note(cell.number, line, source, "kept as code", param)
    if last and isinstance(node, ast.Expr) and not _is_print(node.value):
        return Stmt(cell.number, line, "show", value, step)
    return Stmt(cell.number, line, "code", source, step)


def _is_print(node: ast.expr) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return isinstance(f, ast.Name) and f.id == "print"


def _finish(a: Analysis, timeline: list[tuple[int, int, str]], serve: ServeAliases) -> None:
    for s in a.stmts:
        try:
            s.binds, s.loads = binds_and_loads(s.source)
        except SyntaxError as exc:
            raise ExportError(
                f"cell {s.cell}, line {s.line}: {exc.msg}",
                detail="a pipeline runs the cell's code inside a function: top-level await "
                "and return do not work there",
            ) from None
    place_definitions(a.stmts, {p.name for p in a.params})
    resolve_apps(a, serve)
    trees = [ast.parse(s.source) for s in a.stmts]
    a.uses_serve = any(imports_serve(n) for t in trees for n in t.body)
    a.gpu_cells = sorted({s.cell for s, t in zip(a.stmts, trees, strict=True) if _asks_gpus(t)})
    a.add_env([n for n in env_reads(trees) if not _set_by_the_runtime(n)])
    a.undefined = undefined_names(timeline)


def _asks_gpus(tree: ast.AST) -> bool:
    """`num_gpus=` with a value other than 0 anywhere (ray.remote, .options(), ...)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "num_gpus":
            value = node.value
            if not (isinstance(value, ast.Constant) and value.value in (0, None)):
                return True
    return False


def _set_by_the_runtime(name: str) -> bool:
    """Variables Ray, the GPU runtime or the OS set on each worker: forwarding the Dagster
    process's values would override them (CUDA_VISIBLE_DEVICES above all)."""
    return name.startswith(_RUNTIME_PREFIXES) or name in _RUNTIME_NAMES


def undefined_names(timeline: list[tuple[int, int, str]]) -> list[str]:
    """pyflakes' undefined names over the kept code, run top to bottom as one module."""
    checker = importlib.import_module("pyflakes.checker")  # untyped
    messages = importlib.import_module("pyflakes.messages")
    text_lines: list[str] = []
    origin: list[tuple[int, int]] = []
    for cell, line, source in timeline:
        for i, text in enumerate(source.splitlines() or [""]):
            text_lines.append(text)
            origin.append((cell, line + i))
    tree = ast.parse("\n".join(text_lines) + "\n")
    found = checker.Checker(tree, filename="notebook")
    out = []
    for m in sorted(found.messages, key=lambda m: m.lineno):
        if isinstance(m, messages.UndefinedName | messages.UndefinedLocal):
            cell, line = origin[m.lineno - 1]
            entry = f"cell {cell}, line {line}: {m.message % m.message_args}"
            if entry not in out:
                out.append(entry)
    return out
