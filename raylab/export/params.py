"""The `parameters` cell's literal assignments -> typed config fields with defaults.

As papermill/dagstermill read that cell: `epochs = 3` becomes `epochs: int = 3` in the
asset's `dg.Config`, so a run (or the schedule) can change it without editing code.
"""

from __future__ import annotations

import ast
import keyword
import math

from .model import Parameter

_SCALARS: dict[type, str] = {bool: "bool", int: "int", float: "float", str: "str"}
# Attributes of pydantic's BaseModel that a config field must not shadow.
_RESERVED = frozenset(
    ["copy", "dict", "json", "schema", "schema_json", "construct", "validate", "parse_obj",
     "parse_raw", "parse_file", "from_orm", "update_forward_refs", "fields"]
)  # fmt: skip


def parameter_of(node: ast.stmt, cell: int, line: int) -> Parameter | str | None:
    """A Parameter; or why an assignment stays code; None for other statements."""
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target, value = node.targets[0], node.value
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target, value = node.target, node.value
    else:
        return None
    if not isinstance(target, ast.Name):
        return "not a plain name = value assignment"
    name = target.id
    if name.startswith("_") or name.startswith("model_") or name in _RESERVED:
        return f"{name} cannot be a config field name"
    if keyword.iskeyword(name):
        return f"{name} is a Python keyword"
    try:
        literal = ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return "not a literal value, so not configurable"
    if isinstance(literal, tuple):
        literal = list(literal)
    if not _finite(literal):
        return "not a finite number (inf or nan), which run config cannot hold"
    annotation = annotation_of(literal)
    if annotation is None:
        return "a literal of a type config cannot hold"
    return Parameter(name, annotation, literal, cell, line)


def _finite(value: object) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list | tuple):
        return all(_finite(v) for v in value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    return True


def annotation_of(value: object) -> str | None:
    if value is None:
        return "str | None"  # the notebook does not say; a string is the most general
    for kind, name in _SCALARS.items():
        if type(value) is kind:
            return name
    if isinstance(value, list):
        inner = _common([annotation_of(v) for v in value]) if value else "str"
        return f"list[{inner}]" if inner else None
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            return None
        inner = _common([annotation_of(v) for v in value.values()]) if value else "str"
        return f"dict[str, {inner}]" if inner else None
    return None


def _common(annotations: list[str | None]) -> str | None:
    kinds = set(annotations)
    if None in kinds:
        return None
    if kinds == {"int", "float"}:
        return "float"
    return kinds.pop() if len(kinds) == 1 else None
