"""What `%%raycluster job` and `job result` hand the magic: the cell's value. Kept apart
(stdlib only) so that `%load_ext raylab` does not import the jobs' machinery."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobValue:
    """A job's result, for the magic to hand back as the cell's value."""

    value: Any
