"""The notebook's own modules reach the workers as they are now, without a reconnect.

Ray ships the working directory once, when the kernel connects; a module written or
edited after that (`helper.py`, then `import helper`, or a function changed under
`%autoreload`) would be stale or missing on the workers until a reconnect drops every
actor and object of the session. Instead, each module whose file lies in the working
directory is registered with cloudpickle's pickle-by-value as it is imported (and those
imported before connecting, at connect): a task that calls it carries its code as the
kernel has it at that moment. Installed packages stay by reference (the workers have
them), and so do Python's own modules and anything under a virtual environment inside
the folder, even when the folder holds them all (a kernel started in `/`).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import sysconfig
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

_lock = threading.Lock()
_root: Path | None = None
_registered: set[str] = set()


def _installations() -> tuple[Path, ...]:
    """Where Python and its packages are installed: never the notebook's own code."""
    paths = sysconfig.get_paths()
    found = {sys.prefix, sys.base_prefix, sys.exec_prefix, paths["stdlib"], paths["platstdlib"]}
    resolved = {Path(p).resolve() for p in found if p}
    return tuple(p for p in resolved if p != Path(p.anchor))  # never the whole disk


_INSTALLED = _installations()


def follow(root: str | Path) -> list[str]:
    """Pickle by value every module under `root`, imported now or later; returns the
    names registered now. Following another folder replaces the last one."""
    global _root
    with _lock:
        _root = Path(root).resolve()
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())
    return [name for name, module in list(sys.modules.items()) if _register(module)]


def stop() -> None:
    """Stop registering new imports (what is registered stays: cloudpickle keeps it)."""
    global _root
    with _lock:
        _root = None


def _ours(path: str | None) -> bool:
    root = _root
    if root is None or not path:
        return False
    try:
        where = Path(path).resolve()
    except (OSError, ValueError):
        return False
    if not where.is_relative_to(root) or any(where.is_relative_to(p) for p in _INSTALLED):
        return False
    return not any(part in ("site-packages", "dist-packages") for part in where.parts)


def _register(module: ModuleType | Any) -> bool:
    name = getattr(module, "__name__", None)
    if not isinstance(module, ModuleType) or not name or name in _registered:
        return False
    if name == "__main__" or not _ours(getattr(module, "__file__", None)):
        return False
    from ray import cloudpickle

    try:
        cloudpickle.register_pickle_by_value(module)  # type: ignore[no-untyped-call]
    except ValueError:  # not in sys.modules (a module object made by hand): leave it
        return False
    _registered.add(name)
    return True


class _Finder(importlib.abc.MetaPathFinder):
    """Finds what the normal path finder finds; for a module of the working directory,
    its loader registers the module once it has run."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if _root is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or not _ours(spec.origin) or spec.loader is None:
            return None  # let the other finders answer as they would have
        spec.loader = _RegisteringLoader(spec.loader)
        return spec


class _RegisteringLoader(importlib.abc.Loader):
    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def create_module(self, spec: Any) -> Any:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        _registered.discard(module.__name__)  # a reload registers again, harmlessly
        _register(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, is_package…
        if name.startswith("__") or name == "_inner":  # unpickling, before _inner is set
            raise AttributeError(name)
        return getattr(self._inner, name)
