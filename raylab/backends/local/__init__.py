"""The local backend: each cluster's head and workers are `ray start` processes on this
machine (processes.py, node.py), with ports (ports.py) and object-store sizes (memory.py)
picked for a small machine; state in one folder per cluster (backend.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import LocalBackend

__all__ = ["LocalBackend"]


def __getattr__(name: str) -> Any:
    # Lazily: the export and the culler import the manifest or a helper from this
    # package without loading the whole backend.
    if name == "LocalBackend":
        from .backend import LocalBackend

        return LocalBackend
    raise AttributeError(name)
