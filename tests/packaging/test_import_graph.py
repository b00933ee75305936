"""The floor plan stays free of circles: no two modules import each other (directly or
around a loop), nor do two packages. Every import counts, lazy and type-only ones too,
since each is a dependency a reader has to follow."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

RAYLAB = Path(__file__).resolve().parents[2] / "raylab"


def _modules() -> dict[str, Path]:
    found = {}
    for path in RAYLAB.rglob("*.py"):
        parts = path.relative_to(RAYLAB.parent).with_suffix("").parts
        if "labextension" in parts or "templates" in parts:
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's raylab imports, as module names (`from .x import y` names x.y when
    y is a module, else x)."""
    edges: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in modules:
                        edges[name].add(target)
                    elif base in modules:
                        edges[name].add(base)
            elif isinstance(node, ast.Import):
                edges[name].update(a.name for a in node.names if a.name in modules)
    return edges


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return out


def _room(module: str, modules: dict[str, Path]) -> str:
    """The package a module lives in; a module of the root is a room of its own (the
    root holds the entry points and the pure modules alike)."""
    package = module if modules[module].name == "__init__.py" else module.rpartition(".")[0]
    return module if package == "raylab" else package


def _between(pairs: Iterable[tuple[str, str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for a, b in pairs:
        edges.setdefault(a, set()).add(b)
        edges.setdefault(b, set())
    return edges


def test_no_module_imports_itself_around_a_loop() -> None:
    modules = _modules()
    assert _circles(_imports(modules)) == []


def test_no_two_packages_import_each_other() -> None:
    modules = _modules()
    pairs = []
    for module, targets in _imports(modules).items():
        for target in targets:
            a, b = _room(module, modules), _room(target, modules)
            # A package choosing among its own sub-packages (backends' make_backend) is
            # the parent's job; the children importing the parent's base is the rule.
            if a != b and not b.startswith(a + "."):
                pairs.append((a, b))
    assert _circles(_between(pairs)) == []
