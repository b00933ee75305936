"""Export a notebook and its Ray cluster as a Dagster project (`%raycluster export`).

Nothing here imports Dagster: the generated project depends on it, raylab does not. The
names below load on first use, so that `raylab.export.verb` (imported whenever the verbs'
parser is built) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .api import DEFAULT_SCHEDULE, ExportResult, export_notebook
    from .errors import ExportError

__all__ = ["DEFAULT_SCHEDULE", "ExportError", "ExportResult", "export_notebook"]
_WHERE = {"DEFAULT_SCHEDULE": "api", "ExportResult": "api", "export_notebook": "api",
          "ExportError": "errors"}  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
