"""Values a notebook writes into its process environment, in every form it may write them.

What a notebook puts into `os.environ` is configuration of where it ran, often a secret
(`os.environ["WANDB_API_KEY"] = "..."`). A pipeline's code is committed and shared, so
a statement that writes a value it spells out (a literal anywhere in it: a string, an
f-string, a number) is left out, and the variable is forwarded by name instead. The
forms: `environ[K] = v` (chained, in tuples, `+=`), `environ |= {...}`,
`environ.update(...)`, `.setdefault(K, v)`, `.__setitem__(K, v)` and `putenv(K, v)`,
through `os`, `import os as o`, `from os import environ as e` and `from os import putenv`
(also `environb`). A value computed from names only (`os.environ["K"] = token`) has
nothing to hide in this statement and stays; `token`'s own assignment is the
notebook's code, as any other.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

_ENVIRON_ATTRS = frozenset({"environ", "environb"})
_WRITING_METHODS = frozenset({"update", "setdefault", "__setitem__"})
RUN_TIME_NAME = "a variable named at run time"


@dataclass
class EnvAliases:
    """Names that mean os.environ or os.putenv in this notebook (learned from imports)."""

    environs: set[str] = field(default_factory=lambda: {"environ"})
    putenvs: set[str] = field(default_factory=set)

    def learn(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            for alias in node.names:
                bound = alias.asname or alias.name
                if alias.name in _ENVIRON_ATTRS:
                    self.environs.add(bound)
                elif alias.name == "putenv":
                    self.putenvs.add(bound)

    def is_environ(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.environs
        # `os.environ`, `o.environ` (any module alias): the attribute names it.
        return isinstance(node, ast.Attribute) and node.attr in _ENVIRON_ATTRS

    def is_putenv(self, node: ast.expr) -> bool:
        if isinstance(node, ast.Name):
            return node.id in self.putenvs
        return isinstance(node, ast.Attribute) and node.attr == "putenv"


@dataclass(frozen=True)
class EnvWrite:
    names: tuple[str, ...]  # the variables set (RUN_TIME_NAME for a computed one)
    values: tuple[str, ...]  # the text literals written, never to be copied anywhere


def env_write(node: ast.stmt, aliases: EnvAliases) -> EnvWrite | None:
    """The writes of a value spelt out in the notebook, in `node`'s own expressions (the
    statements nested in it are looked at one by one, as the cleaner visits them)."""
    names: list[str] = []
    values: list[ast.expr] = []
    for sub in _own_nodes(node):
        for key, value in _writes(sub, aliases):
            if _has_literal(value):
                names.append(_name_of(key))
                values.append(value)
    if not names:
        return None
    unique = tuple(dict.fromkeys(names))
    return EnvWrite(unique, tuple(t for v in values for t in _texts(v)))


def _own_nodes(node: ast.stmt) -> Iterator[ast.AST]:
    """`node` and what it holds, but not the statements nested in it (a body's)."""
    todo: list[ast.AST] = [node]
    while todo:
        current = todo.pop()
        yield current
        todo += [c for c in ast.iter_child_nodes(current) if not isinstance(c, ast.stmt)]


def _writes(node: ast.AST, aliases: EnvAliases) -> Iterator[tuple[ast.expr | None, ast.expr]]:
    """(the variable's name expression or None when unknown, the value) of each write."""
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        value = node.value
        if value is None:
            return
        for target in targets:
            if isinstance(node, ast.AugAssign) and aliases.is_environ(target):
                yield from _pairs(value)  # environ |= {...}
            for part in _flat(target):
                if isinstance(part, ast.Subscript) and aliases.is_environ(part.value):
                    yield part.slice, value
    elif isinstance(node, ast.Call):
        func, args = node.func, node.args
        if aliases.is_putenv(func) or (
            isinstance(func, ast.Attribute)
            and func.attr in _WRITING_METHODS
            and aliases.is_environ(func.value)
        ):
            if isinstance(func, ast.Attribute) and func.attr == "update":
                for arg in args:
                    yield from _pairs(arg)
                for kw in node.keywords:
                    if kw.arg is None:  # update(**mapping)
                        yield from _pairs(kw.value)
                    else:
                        yield ast.Constant(kw.arg), kw.value
            elif args:
                yield args[0], ast.Tuple(elts=args[1:], ctx=ast.Load())


def bound_names(node: ast.stmt) -> list[str]:
    """The plain names an assignment binds (`copy` in `copy = os.environ["K"] = v`)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign | ast.AugAssign):
        targets = [node.target]
    else:
        return []
    return [t.id for target in targets for t in _flat(target) if isinstance(t, ast.Name)]


def _pairs(mapping: ast.expr) -> Iterator[tuple[ast.expr | None, ast.expr]]:
    """The (key, value) pairs of a dict display or a list of pairs; else one unknown."""
    if isinstance(mapping, ast.Dict):
        yield from zip(mapping.keys, mapping.values, strict=True)
    elif isinstance(mapping, ast.List | ast.Tuple) and all(
        isinstance(e, ast.Tuple | ast.List) and len(e.elts) == 2 for e in mapping.elts
    ):
        for pair in mapping.elts:
            assert isinstance(pair, ast.Tuple | ast.List)
            yield pair.elts[0], pair.elts[1]
    else:
        yield None, mapping


def _flat(target: ast.expr) -> Iterator[ast.expr]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _flat(element)
    elif isinstance(target, ast.Starred):
        yield from _flat(target.value)
    else:
        yield target


def _has_literal(value: ast.expr) -> bool:
    for sub in ast.walk(value):
        if isinstance(sub, ast.JoinedStr):
            return True
        if isinstance(sub, ast.Constant) and _is_text_or_number(sub.value):
            return True
    return False


def _is_text_or_number(value: object) -> bool:
    return isinstance(value, str | bytes | int | float) and not isinstance(value, bool)


def _name_of(key: ast.expr | None) -> str:
    if isinstance(key, ast.Constant) and isinstance(key.value, bytes):
        return key.value.decode(errors="replace")
    if isinstance(key, ast.Constant) and isinstance(key.value, str):
        return key.value
    return RUN_TIME_NAME


def _texts(value: ast.expr) -> list[str]:
    """The literals in a value as text (what the notebook's saved output is checked
    against before it is kept)."""
    out: list[str] = []
    for sub in ast.walk(value):
        if isinstance(sub, ast.Constant) and not isinstance(sub.value, bool):
            raw = sub.value
            if isinstance(raw, bytes):
                raw = raw.decode(errors="replace")
            if isinstance(raw, str | int | float):
                out.append(str(raw))
    return out
