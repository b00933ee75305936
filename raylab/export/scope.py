"""Which names a statement binds and reads at the notebook's top level (via `symtable`).

This decides where a notebook function can live: a function that reads only imports and
other such functions goes to the module's top level, where Ray workers import it by
reference; one that reads values the notebook computes stays inside `run()`, where it
sees them as the notebook did (Ray then pickles it by value with those values).
"""

from __future__ import annotations

import ast
import symtable
from collections.abc import Iterable

from .model import Stmt

# Calls allowed in a decorator of a module-level function: `ray.remote(num_gpus=1)`,
# `dataclass(frozen=True)`; they wrap the definition, they do not run notebook code.
_INERT_VALUES = (ast.Constant, ast.Name, ast.Attribute)


def binds_and_loads(source: str) -> tuple[frozenset[str], frozenset[str]]:
    """Top-level names that `source` binds, and top-level names it (or any function in it) reads."""
    table = symtable.symtable(source, "<cell>", "exec")
    binds: set[str] = set()
    loads: set[str] = set()
    for sym in table.get_symbols():
        if sym.is_assigned() or sym.is_imported():
            binds.add(sym.get_name())
        if sym.is_referenced():
            loads.add(sym.get_name())
    for child in table.get_children():
        _globals_of(child, binds, loads)
    return frozenset(binds), frozenset(loads)


def _globals_of(table: symtable.SymbolTable, binds: set[str], loads: set[str]) -> None:
    for sym in table.get_symbols():
        if not sym.is_global():
            continue
        if sym.is_referenced():
            loads.add(sym.get_name())
        if sym.is_declared_global() and sym.is_assigned():
            binds.add(sym.get_name())
    for child in table.get_children():
        _globals_of(child, binds, loads)


def is_inert(node: ast.stmt) -> bool:
    """True when defining `node` runs no notebook code (so it may run at import time)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        defaults = [*node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)]
        return all(_inert_decorator(d) for d in node.decorator_list) and all(
            isinstance(d, _INERT_VALUES) or _literal(d) for d in defaults
        )
    if isinstance(node, ast.ClassDef):
        return (
            all(_inert_decorator(d) for d in node.decorator_list)
            and all(isinstance(b, ast.Name | ast.Attribute) for b in node.bases)
            and all(_inert_class_statement(s) for s in node.body)
        )
    return False


def _inert_decorator(node: ast.expr) -> bool:
    if isinstance(node, ast.Name | ast.Attribute):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute):
        args = [*node.args, *(k.value for k in node.keywords)]
        return all(isinstance(a, _INERT_VALUES) or _literal(a) for a in args)
    return False


def _inert_class_statement(node: ast.stmt) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return is_inert(node)
    if isinstance(node, ast.Pass):
        return True
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant)
    if isinstance(node, ast.AnnAssign):
        return node.value is None or _literal(node.value) or isinstance(node.value, ast.Name)
    if isinstance(node, ast.Assign):
        return _literal(node.value)
    return False


def _literal(node: ast.expr) -> bool:
    try:
        ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


def place_definitions(stmts: list[Stmt], params: set[str]) -> None:
    """Mark the defs that can live at module level; the others stay in notebook order.

    A def stays inside `run()` when it reads a name the notebook's code binds, another
    def that stays, a name bound twice (order matters then), or runs code when defined.
    """
    state = set(params)  # run-time values: a def reading one must see the run's value
    seen: dict[str, int] = {}
    for s in stmts:
        if s.kind in ("code", "show"):
            state |= s.binds
        for name in s.binds:
            seen[name] = seen.get(name, 0) + 1
    defs = [s for s in stmts if s.kind == "def"]
    staying = {s.name for s in defs if not s.inert or (s.name and seen.get(s.name, 0) > 1)}
    changed = True
    while changed:
        changed = False
        for s in defs:
            if s.name in staying:
                continue
            # Reads, or (through `global`) writes, a run-time value. (`x += 1` is not a
            # read for symtable, so writes count too.)
            touched = s.loads | (s.binds - {s.name})
            if touched & (state | staying):
                staying.add(s.name)
                changed = True
    for s in defs:
        s.module_level = s.name not in staying


def env_reads(nodes: Iterable[ast.AST]) -> list[str]:
    """Environment variables read with a literal name: os.environ["X"], os.getenv("X"), ..."""
    found: list[str] = []
    for root in nodes:
        for node in ast.walk(root):
            key: ast.expr | None = None
            if isinstance(node, ast.Subscript) and _is_environ(node.value):
                key = node.slice
            elif isinstance(node, ast.Call) and node.args:
                func = node.func
                if (isinstance(func, ast.Attribute) and func.attr in ("get", "setdefault")
                        and _is_environ(func.value)) or _is_getenv(func):  # fmt: skip
                    key = node.args[0]
            name = key.value if isinstance(key, ast.Constant) else None
            if isinstance(name, str) and name not in found:
                found.append(name)
    return found


def _is_environ(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "environ"
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _is_getenv(node: ast.expr) -> bool:
    if isinstance(node, ast.Name):
        return node.id == "getenv"
    return isinstance(node, ast.Attribute) and node.attr == "getenv"
