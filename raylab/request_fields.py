"""What one request field's declaration holds, and what is drawn from it.

`spec.ClusterSpec` declares each of its fields once, in dask-gateway's options style: its
type, bounds, texts and command-line flag. The command line's options (`commands/parser`),
the REST check (`ClusterSpec.from_mapping`) and the New-cluster dialog (the `fields` of
`GET profiles`) all loop over these declarations, so a new field is one declaration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .errors import SpecError
from .profiles import GpuProfile, Profiles

# Where a ClusterSpec dataclass field's metadata holds its declaration.
DECLARATION = "raylab.field"
# ASCII digits only: str.isdigit() also accepts "¹" and "٣", which int() refuses.
_WHOLE = re.compile(r"\+?[0-9]+")


class Draft:
    """A request being read field by field, in declared order: a field's checks see the
    values of the fields declared before it (workers see the GPU type's profile)."""

    def __init__(self, data: Mapping[str, Any], profiles: Profiles) -> None:
        self.data = data
        self.profiles = profiles
        self.values: dict[str, Any] = {}

    @property
    def profile(self) -> GpuProfile:
        """The requested GPU type's profile, once `gpu_type` has been read."""
        return self.profiles.gpu_types[self.values["gpu_type"]]


@dataclass(frozen=True, kw_only=True)
class Field:
    """A text field; the base of every kind.

    `read` replaces the kind's own check where a field needs its own hints (a name, a GPU
    type, a quantity); `then` checks a field against those read before it.
    """

    label: str  # the dialog's label
    help: str  # the command line's --help
    flag: str | None  # the command line's option; None: REST only
    metavar: str | None = None  # None: argparse's, the field's name in capitals
    hint: str | None = None  # shown under the dialog's input
    placeholder: str | None = None
    dialog: bool = True  # drawn in the New-cluster dialog
    # Left out: this (None: no value). A text field sent as null has no value either
    # (the backend's own default); a whole number sent as null gets the default too.
    default: Callable[[Draft], object] | None = None
    read: Callable[[object, Draft], object] | None = None
    then: Callable[[Any, Draft], None] | None = None
    # Text: what a value must be, and what a refusal says it is not ("{value!r} is not ...").
    pattern: re.Pattern[str] | None = None
    max_length: int | None = None
    refused: str = "text"
    kind: str = "text"  # how the dialog draws it: text, whole, quantity, duration, choice
    _null_is_default = False  # a class setting, not a field (no annotation)

    def value(self, name: str, draft: Draft) -> object:
        """This field's checked value in `draft` (stored in it for the fields after)."""
        data = draft.data
        if self.read is not None:
            value = self.read(data.get(name), draft)
        elif data.get(name) is None:
            absent = name not in data or self._null_is_default
            value = self.default(draft) if absent and self.default is not None else None
        else:
            value = self.check(name, data[name])
        if self.then is not None:
            self.then(value, draft)
        draft.values[name] = value
        return value

    def check(self, name: str, value: object) -> object:
        """The kind's own check of a value that was given."""
        if (
            not isinstance(value, str)
            or (self.max_length is not None and len(value) > self.max_length)
            or (self.pattern is not None and not self.pattern.fullmatch(value))
        ):
            raise SpecError(name, f"{shown(value)} is not {self.refused}")
        return value

    def describe(self, name: str) -> dict[str, Any]:
        """What the dialog draws (served with `GET profiles`)."""
        return {
            "name": name,
            "kind": self.kind,
            "label": self.label,
            "help": self.help,
            "hint": self.hint,
            "placeholder": self.placeholder,
            "dialog": self.dialog,
        }


@dataclass(frozen=True, kw_only=True)
class Whole(Field):
    """A whole number within low..high; digits in a string (a form, a command line) too."""

    low: int
    high: int
    kind: str = "whole"
    _null_is_default = True

    def check(self, name: str, value: object) -> object:
        return whole_number(value, name, self.low, self.high)

    def describe(self, name: str) -> dict[str, Any]:
        return {**super().describe(name), "min": self.low, "max": self.high}


def whole_number(value: object, field: str, low: int, high: int) -> int:
    """`value` (an int, or digits from a command line or form) within low..high."""
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"{shown(value)} is not a whole number; use {low} to {high}")
    if not low <= value <= high:
        raise SpecError(field, f"{value} is out of range; use {low} to {high}")
    return value


def shown(value: object) -> str:
    """A short, safe rendering of user input for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
