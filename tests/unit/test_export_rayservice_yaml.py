"""rayservice.yaml's writer: what it writes reads back as the same value, whatever the strings."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from raylab.export.rayservice import to_yaml as dump

HOSTILE = [
    "", "yes", "No", "null", "~", "1.0", "0x10", "- a", "a: b", "#c", "'q'", '"q"', "\\",
    "a\tb", "a\nb", "a\n", "\n", " lead", "trail ", "\x85", "\u2028", "\x1b[2J", "\ufeff",
    "\U0001f600", "\ud800", "{x}", "[1]", "&a", "*a", "!tag", "%x", "@x", "`x`", "|", ">",
    "../../etc/passwd", "ray.io/v1", "key:", "\x00",
]  # fmt: skip


@pytest.mark.parametrize("text", HOSTILE)
def test_a_string_reads_back_as_itself_as_key_and_value(text: str) -> None:
    value: dict[str, Any] = {text: text, "list": [text, {text: [text]}], "k": {"n": text}}
    assert yaml.safe_load(dump(value)) == value


def test_structure_and_scalars() -> None:
    value: dict[str, Any] = {
        "a": {}, "b": [], "c": [[1, 2], [], [{"d": None}]], "e": True, "f": 1.5, "g": -3,
        "config": "applications:\n  - name: x\n",
    }  # fmt: skip
    assert yaml.safe_load(dump(value)) == value
