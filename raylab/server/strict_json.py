"""REST bodies as strict JSON: what Python's `json` lets through is refused here.

`json.loads` accepts `NaN`, `Infinity` and `-Infinity` (not JSON), turns `1e400` into
inf, keeps the last of two equal keys, and on deep nesting raises RecursionError, which
is not a ValueError and became a 500. A body is a user's input: each of these is one
`SpecError` (422) naming the field, before any handler sees a value.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from ..errors import SpecError
from ..spec import shown_field

MAX_BYTES = 64 * 1024
# No raylab field nests more than a few levels; 32 leaves room and stays far below the
# interpreter's recursion limit.
MAX_DEPTH = 32
# JSON strings (escapes included) and the brackets outside them: enough to measure
# nesting before the parser recurses into it.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(r"[\[\]{}]")


class _NotFinite:
    """A number JSON does not allow, kept as written until its field is known."""

    def __init__(self, text: str) -> None:
        self.text = text


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object (an empty body is `{}`), or one SpecError."""
    if len(raw) > MAX_BYTES:
        raise SpecError("body", f"larger than {MAX_BYTES} bytes")
    try:
        text = raw.decode(json.detect_encoding(raw)) if raw else "{}"
    except UnicodeDecodeError:
        raise SpecError("body", "not valid JSON (not UTF-8 text)") from None
    if _depth(text) > MAX_DEPTH:
        raise SpecError("body", f"nested deeper than {MAX_DEPTH} levels; send a flat object")
    try:
        body = json.loads(
            text,
            parse_constant=_NotFinite,
            parse_float=_float,
            object_pairs_hook=_object,
        )
    except RecursionError:  # the depth check should have caught it; never a 500
        raise SpecError("body", f"nested deeper than {MAX_DEPTH} levels") from None
    except ValueError:
        raise SpecError("body", "not valid JSON") from None
    if not isinstance(body, dict):
        _check_finite(body, "body")
        raise SpecError("body", "expected a JSON object")
    for key, value in body.items():
        _check_finite(value, shown_field(key))
    return body


def _depth(text: str) -> int:
    """How deep the brackets outside strings nest (stops counting past the limit)."""
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub("", text)):
        depth += 1 if match.group() in "[{" else -1
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
    return deepest


def _float(text: str) -> float | _NotFinite:
    value = float(text)
    return value if math.isfinite(value) else _NotFinite(text)


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Two parsers may keep different copies (a proxy checks the first, Python
            # keeps the last): a body that says two things is refused, not guessed.
            raise SpecError(shown_field(key), "given twice in the body; give it once")
        out[key] = value
    return out


def _check_finite(value: object, field: str) -> None:
    """Refuse the first non-finite number anywhere in `value` (the body nests at most
    MAX_DEPTH levels, so the recursion is bounded)."""
    if isinstance(value, _NotFinite):
        raise SpecError(
            field,
            f"{value.text} is not a finite number, which JSON requires; give a number such "
            "as 30 or 0.5",
        )
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for child in value:
            _check_finite(child, field)
