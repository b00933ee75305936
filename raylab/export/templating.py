"""Filling the project templates: Python and TOML literals that read like hand-written code.

Every value a template shows is escaped by default (the environment's `finalize`): a
plain string is rendered as *text*, safe inside a double-quoted or triple-quoted string,
a docstring or a comment, in Python and in TOML alike (backslashes, double quotes and
every unprintable character escaped, so that it can end neither the string nor the
line). A notebook's file name, a cluster's description and the like are user-controlled:
written unescaped into a docstring they closed its quotes and ran code on import. What
is meant as code says so: the literal filters (`pyrepr`, `pyliteral`, `tomlstr`) and
`ident`, which checks an identifier. Templates therefore put text only inside
double-quoted strings, docstrings and comments, never inside single quotes.
"""

from __future__ import annotations

import math
import re
from functools import cache
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined

from .errors import ExportError

WIDTH = 88
_SURROGATE = re.compile("[\ud800-\udfff]")
_SHORT_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


class Code(str):
    """Text that already is Python or TOML source: shown by a template as it is."""

    __slots__ = ()


def text(value: str) -> str:
    """`value` as the inside of a Python or TOML double-quoted string (also fine in a
    docstring and in a comment): it reads as written once the string is evaluated."""
    return "".join(_escaped(ch) for ch in value)


def _escaped(ch: str) -> str:
    if ch in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[ch]
    if ch.isprintable():
        return ch
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def py_repr(value: Any) -> str:
    """`repr`, with double-quoted strings (as ruff and black write them)."""
    if isinstance(value, str):
        return f'"{text(value)}"'
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'  # repr would write inf or nan: names, not numbers
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
    """A TOML basic string (`text` uses only escapes TOML also has). A lone surrogate (a
    file name that is not UTF-8) has no TOML escape: it becomes U+FFFD."""
    return f'"{text(_SURROGATE.sub(chr(0xFFFD), value))}"'


def identifier(value: str) -> Code:
    """A name the template writes as code: it must be a Python identifier."""
    if not (isinstance(value, str) and value.isidentifier()):
        raise ExportError(
            f"{value!r} would be written as a Python name but is not one",
            detail="this is a raylab bug; nothing was written",
        )
    return Code(value)


def _finalize(value: Any) -> str:
    """What `{{ value }}` writes: code as it is, numbers as numbers, anything else as text."""
    if isinstance(value, Code):
        return value
    if isinstance(value, bool | int | float):
        return py_repr(value)
    if isinstance(value, str):
        return text(value)
    raise TypeError(f"a template was given {type(value).__name__} to show; convert it first")


@cache
def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("raylab.export", "templates"),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # Python and TOML, not HTML: `finalize` escapes instead
        finalize=_finalize,
    )
    env.filters["pyrepr"] = lambda v: Code(py_repr(v))
    env.filters["pyliteral"] = lambda v, indent=0, lead=0: Code(py_literal(v, indent, lead))
    env.filters["tomlstr"] = lambda v: Code(toml_string(v))
    env.filters["ident"] = identifier
    return env


def render(template: str, **values: Any) -> str:
    return environment().get_template(template).render(**values)
