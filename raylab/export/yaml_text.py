"""Kubernetes manifests as block YAML, every key and string written by `json.dumps`.

raylab does not depend on a YAML library, and JSON is YAML: each scalar is a JSON value
(a double-quoted string whose escapes YAML reads alike), so nothing a notebook wrote (an
app name, a route prefix) can end a string, start a line, or become a key. Characters
YAML may not hold raw (C1 controls, U+2028, lone surrogates...) are escaped as well. A
multi-line string that needs no escaping is written as a literal block (`|`), the way
KubeRay's samples show serveConfigV2.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

_INDENT = "  "
# Strings YAML reads as themselves unquoted: a letter first, then letters, digits and
# `_ . - /` (no `:`, `#`, space or quote), except the words YAML 1.1 reads as booleans
# or null.
_PLAIN = re.compile(r"[A-Za-z][A-Za-z0-9_./-]*")
_YAML_WORDS = frozenset({"y", "n", "yes", "no", "true", "false", "on", "off", "null"})


def dump(value: dict[str, Any]) -> str:
    """`value` (dicts, lists, str, int, float, bool, None) as a YAML document."""
    return "\n".join(_mapping(value, 0)) + "\n"


def scalar(value: Any) -> str:
    """One YAML scalar: a word as it is (`name`, `ray.io/v1`), anything else in JSON's
    spelling, with YAML-safe escapes for any string."""
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        return "".join(_safe(ch) for ch in json.dumps(value, ensure_ascii=False))
    if value is None or isinstance(value, bool | int | float):
        return json.dumps(value)  # null, true, 3, 1.5 (NaN/inf raise below)
    raise TypeError(f"cannot write {type(value).__name__} as YAML")


def _safe(ch: str) -> str:
    if ch.isprintable() or ch in " ":
        return ch
    code = ord(ch)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def _mapping(value: dict[str, Any], depth: int) -> list[str]:
    pad = _INDENT * depth
    if not value:
        return [pad + "{}"]
    lines: list[str] = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise TypeError(f"YAML keys here are strings, not {type(key).__name__}")
        head = f"{pad}{scalar(key)}:"
        if isinstance(item, dict) and item:
            lines += [head, *_mapping(item, depth + 1)]
        elif isinstance(item, list) and item:
            lines += [head, *_sequence(item, depth + 1)]
        elif isinstance(item, str) and _literal_block(item):
            block = _INDENT * (depth + 1)
            lines += [head + " |", *(block + ln if ln else "" for ln in item.split("\n")[:-1])]
        else:
            lines.append(f"{head} {_flow(item)}")
    return lines


def _sequence(value: list[Any], depth: int) -> list[str]:
    pad = _INDENT * depth
    lines: list[str] = []
    for item in value:
        if (isinstance(item, dict | list)) and item:
            inner = (
                _mapping(item, depth + 1) if isinstance(item, dict) else _sequence(item, depth + 1)
            )
            first = inner[0][len(pad) + len(_INDENT) :]
            lines += [f"{pad}- {first}", *inner[1:]]
        else:
            lines.append(f"{pad}- {_flow(item)}")
    return lines


def _flow(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"  # only the empty one comes here
    if isinstance(value, list):
        return "[]"
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("NaN and infinity have no JSON spelling")
    return scalar(value)


def _literal_block(text: str) -> bool:
    """A string a `|` block holds exactly: lines of printable characters, the first not
    indented, and one final newline (what `|` keeps)."""
    if not text.endswith("\n") or text.endswith("\n\n") or text[:1] in (" ", "\t", "\n"):
        return False
    return all(line.isprintable() for line in text[:-1].split("\n"))
