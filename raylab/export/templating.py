"""Filling the project templates: Python and TOML literals that read like hand-written code."""

from __future__ import annotations

import ast
import json
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

WIDTH = 88


def py_repr(value: Any) -> str:
    """`repr`, with double-quoted strings (as ruff and black write them)."""
    if isinstance(value, str):
        quoted = json.dumps(value, ensure_ascii=False)
        return quoted if ast.literal_eval(quoted) == value else repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(py_repr(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{py_repr(k)}: {py_repr(v)}" for k, v in value.items()) + "}"
    return repr(value)


def py_literal(value: Any, indent: int = 0, lead: int = 0) -> str:
    """A Python literal of `value`, one item per line once it does not fit on one (as ruff
    format would lay it out). `lead`: characters before it on its first line."""
    flat = py_repr(value)
    if indent + lead + len(flat) + 1 <= WIDTH or not isinstance(value, dict | list) or not value:
        return flat
    pad = " " * indent
    inner = " " * (indent + 4)
    if isinstance(value, dict):
        items = []
        for k, v in value.items():
            key = f"{py_repr(k)}: "
            items.append(f"{inner}{key}{py_literal(v, indent + 4, len(key))},")
        return "{\n" + "\n".join(items) + f"\n{pad}}}"
    items = [f"{inner}{py_literal(v, indent + 4)}," for v in value]
    return "[\n" + "\n".join(items) + f"\n{pad}]"


def toml_string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is written as a JSON string


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("raylab.export", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Python and TOML, not HTML
    )
    env.filters["pyrepr"] = py_repr
    env.filters["pyliteral"] = py_literal
    env.filters["tomlstr"] = toml_string
    return env


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)
