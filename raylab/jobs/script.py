"""A notebook cell -> the Python a Ray job runs as its driver.

The job gets the cell and, from the cells run before it, the imports, functions, classes
and literal constants (`N = 100`, `LABELS = ["a", "b"]`) that it uses, directly or
through each other: what the exporter keeps of a notebook (export/scope.py), because a
job runs where none of the kernel's values are. A name the cell needs that an earlier
cell computed (`df = load()`) is refused before anything is submitted: the job could not
have it.

The code travels as string literals inside the script (never pasted into it as code),
compiled under the names `<cell>` and `<cell N>` with their lines registered, so a
traceback in the job's log shows the cell's own lines.
"""

from __future__ import annotations

import ast
import builtins
import importlib
from collections.abc import Sequence
from dataclasses import dataclass

from ..export.scope import binds_and_loads
from .errors import JobError
from .result import MARK, RESULT_LIMIT_BYTES

# Cell magics whose body is the kernel's Python: earlier such cells still define things.
_PYTHON_CELL_MAGICS = frozenset({"time", "capture", "prun"})
_BUILTINS = frozenset(dir(builtins)) | {"__file__", "__builtins__"}
_VALUE = "_raylab_value"


@dataclass(frozen=True)
class JobScript:
    source: str  # the driver's whole script
    brought: tuple[str, ...]  # names defined by earlier cells that it carries
    returns: bool  # the cell ends with an expression: its value is the job's result


@dataclass
class _Definitions:
    """What earlier cells define at the top level, the latest definition of each name."""

    stmts: dict[str, tuple[int, str, frozenset[str]]]  # name -> (order, source, loads)
    computed: dict[str, int]  # name -> cell number: bound by code the job cannot rerun
    star: list[tuple[int, str]]  # `from x import *`: brought whenever anything is unknown


def build(cell: str, earlier: Sequence[str], nonce: str, label: str = "<cell>") -> JobScript:
    """The job's script for `cell` (its Python, the `%%raycluster job` line removed),
    given the kernel's earlier cells (IPython's `In`, oldest first)."""
    python = _python(cell)
    if python is None or not python.strip():
        raise JobError("the cell is empty: write the code the job runs below the magic line")
    tree = _parse(python, label)
    _refuse_magics(tree, label)
    binds, loads = binds_and_loads(python)
    found = _definitions(earlier)
    wanted: dict[str, tuple[int, str, frozenset[str]]] = {}
    todo = sorted(loads - binds - _BUILTINS)
    computed: list[str] = []
    missing: list[str] = []
    while todo:
        name = todo.pop()
        if name in wanted:
            continue
        if name in found.stmts:
            wanted[name] = found.stmts[name]
            todo.extend(sorted(found.stmts[name][2] - set(wanted) - _BUILTINS))
        elif name in found.computed:
            computed.append(name)
        else:
            missing.append(name)
    if computed:
        name = sorted(computed)[0]
        raise JobError(
            f"the cell uses {name!r}, which cell {found.computed[name]} computed in this "
            "kernel; a job runs on the cluster without the kernel's values",
            detail="compute it in the job's cell, or read it there from storage; "
            "functions, classes, imports and literal constants of earlier cells come along",
        )
    if missing and not found.star:
        names = ", ".join(repr(n) for n in sorted(missing)[:3])
        raise JobError(
            f"the cell uses {names}, defined nowhere in this notebook's cells",
            detail="define or import it in the cell (or in a cell run before it)",
        )
    returns = _ends_with_expression(tree, python)
    chosen = sorted(wanted.values())
    earlier_code = [text for _, text in sorted([*found.star, *[(o, t) for o, t, _ in chosen]])]
    source = _script(python, earlier_code, returns, nonce, label)
    return JobScript(source, tuple(sorted(wanted)), returns)


def _python(cell: str) -> str | None:
    """The cell as Python (magics turned into get_ipython() calls); None for a cell magic
    whose body is not the kernel's Python."""
    stripped = cell.lstrip("\n")
    if stripped.startswith("%%"):
        magic = stripped[2:].split(None, 1)[0] if stripped[2:].strip() else ""
        if magic not in _PYTHON_CELL_MAGICS:
            return None
        stripped = stripped.partition("\n")[2]
    transformer = importlib.import_module("IPython.core.inputtransformer2")  # untyped
    python: str = transformer.TransformerManager().transform_cell(stripped)
    return python


def _parse(python: str, label: str) -> ast.Module:
    try:
        return ast.parse(python)
    except SyntaxError as exc:
        raise JobError(
            f"{label}, line {exc.lineno or 1}: {exc.msg}", detail="fix the cell and run it again"
        ) from None


def _refuse_magics(tree: ast.Module, label: str) -> None:
    for node in ast.walk(tree):
        f = node.func if isinstance(node, ast.Call) else None
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Call):
            inner = f.value.func
            if isinstance(inner, ast.Name) and inner.id == "get_ipython":
                raise JobError(
                    f"{label}, line {getattr(node, 'lineno', 1)}: magics and shell lines "
                    "(`%…`, `!…`) do not run in a job, which has no IPython",
                    detail="use Python there (subprocess.run for a shell command), "
                    "or run that line in a cell of its own before the job",
                )


def _definitions(cells: Sequence[str]) -> _Definitions:
    found = _Definitions({}, {}, [])
    order = 0
    for number, cell in enumerate(cells, start=1):
        python = _python(cell)
        if not python:
            continue
        try:
            tree = ast.parse(python)
        except SyntaxError:
            continue  # it failed in the kernel too: it defined nothing
        lines = python.splitlines(keepends=True)
        for node in tree.body:
            order += 1
            text = "".join(lines[node.lineno - 1 - _decorators(node) : node.end_lineno])
            if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
                found.star.append((order, text))
                continue
            names, kind = _bound(node)
            for name in names:
                found.computed.pop(name, None)
                found.stmts.pop(name, None)
                if kind == "code":
                    found.computed[name] = number
                else:
                    loads = binds_and_loads(text.strip() + "\n")[1] if kind == "def" else None
                    found.stmts[name] = (order, text, loads or frozenset())
    return found


def _decorators(node: ast.stmt) -> int:
    decorators: list[ast.expr] = getattr(node, "decorator_list", None) or []
    return node.lineno - min([node.lineno, *(d.lineno for d in decorators)])


def _bound(node: ast.stmt) -> tuple[list[str], str]:
    """The top-level names a statement binds, and how: "def" (imports, functions and
    classes: code the job can run again), "literal" (a constant), or "code"."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in node.names], "def"
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name], "def"
    if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        if all(isinstance(t, ast.Name) for t in targets):
            names = [t.id for t in targets if isinstance(t, ast.Name)]
            try:
                ast.literal_eval(node.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return names, "code"
            return names, "literal"
    try:
        binds = binds_and_loads(ast.unparse(node))[0]
    except SyntaxError:
        return [], "code"
    return sorted(binds), "code"


def _ends_with_expression(tree: ast.Module, python: str) -> bool:
    """Whether the cell's value shows, as in the kernel: a last expression, no `;`."""
    if not tree.body or not isinstance(tree.body[-1], ast.Expr):
        return False
    return not python.rstrip().endswith(";")


def _script(cell: str, earlier: list[str], returns: bool, nonce: str, label: str) -> str:
    # Only literals of our own and repr() of the user's text reach the script: no text
    # of the notebook can break out of its string.
    return _TEMPLATE.format(
        earlier=repr("".join(earlier)),
        cell=repr(cell),
        label=repr(label),
        returns=repr(returns),
        value=repr(_VALUE),
        mark=repr(MARK),
        nonce=repr(nonce),
        limit=RESULT_LIMIT_BYTES,
    )


# The job's driver. It imports nothing of raylab (a pod's image may lack it): the
# cluster's setup hook (sync/worker_values.py, sync/worker_kv_values.py) gives it the
# environment's values as it gives them to every worker.
_TEMPLATE = '''\
"""A Ray job made by raylab from a notebook cell."""
import ast as _ast
import linecache as _linecache
import os as _os
import sys as _sys


def _raylab_setup():
    import importlib
    hook = _os.environ.get("__RAY_WORKER_PROCESS_SETUP_HOOK_ENV_VAR")
    if not hook:
        return
    if _os.environ.get("RAYLAB_ENV_VALUES_KEY"):  # values in the cluster's KV: read through Ray
        import functools
        import ray
        ray.init(logging_level="WARNING")
        ray.init = functools.partial(ray.init, ignore_reinit_error=True)
    module, _, name = hook.rpartition(".")
    getattr(importlib.import_module(module), name)()


def _raylab_run(source, filename, keep_value):
    _linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    tree = _ast.parse(source, filename)
    if keep_value:
        last = tree.body[-1]
        tree.body[-1] = _ast.copy_location(
            _ast.Assign(targets=[_ast.Name({value}, _ast.Store())], value=last.value), last
        )
        _ast.fix_missing_locations(tree)
    exec(compile(tree, filename, "exec"), globals())


def _raylab_excepthook(kind, value, tb):
    # The cell's frames only, with their lines (the C hook would not read linecache).
    import traceback
    ours = _raylab_run.__code__.co_filename
    while tb is not None and (
        tb.tb_frame.f_code.co_filename in (ours, "<frozen runpy>")
    ):
        tb = tb.tb_next
    traceback.print_exception(kind, value, tb)


_sys.excepthook = _raylab_excepthook


def _raylab_send(value):
    import base64
    import hashlib
    from ray import cloudpickle
    data = cloudpickle.dumps(value)
    if len(data) > {limit}:
        raise SystemExit(
            "raylab: the cell's value is %.1f MiB pickled; a job's result may be at most "
            "%.0f MiB (it travels in the job's log): write larger results to storage and "
            "return where they are" % (len(data) / 2**20, {limit} / 2**20)
        )
    import ray
    if ray.is_initialized():
        ray.shutdown()  # no worker's line lands among the result's
    text = base64.b64encode(data).decode()
    step = 65536
    for i in range(0, len(text), step):
        print({mark}, {nonce}, i // step, text[i : i + step], flush=True)
    print({mark}, {nonce}, "end", hashlib.sha256(data).hexdigest(), flush=True)


_raylab_setup()
_raylab_run({earlier}, "<earlier cells>", False)
_raylab_run({cell}, {label}, {returns})
if {returns} and globals()[{value}] is not None:  # None shows nothing in a kernel either
    _raylab_send(globals()[{value}])
'''
