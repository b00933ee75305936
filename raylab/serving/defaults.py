"""Serve's HTTP proxy at the connected cluster's own port, with no port juggling.

Ray 2.60 fixes Serve's port at 8000 (`DEFAULT_HTTP_PORT`, no variable), and the driver
that first calls `serve.run` decides it for the whole cluster: two local clusters would
both bind 127.0.0.1:8000 (Serve's proxies share it through SO_REUSEPORT) and take each
other's requests. So, in a kernel connected by raylab, Serve starts with the cluster's
own port (chosen up front like its others) and one proxy, on the head: `serve.run`
always asks for a proxy on every node, and on KubeRay a kernel's own node (in the
notebook pod) would otherwise get one too, at a port two clusters share there.

An explicit `serve.start(http_options=...)` is the user's choice and is kept as given.
Serve is imported by the user's own code, later than the connect: its module gets the
default when it is loaded (an import hook), not by importing Serve at each connect.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any
from urllib.parse import urlparse

_MODULE = "ray.serve._private.api"
_FUNCTION = "_create_controller_and_proxy_refs"
# Only the kernel's connected cluster, set and cleared by kernel/connect.py.
_target: dict[str, Any] | None = None


def use(serve_url: str | None) -> None:
    """Where the connected cluster's Serve listens (`Endpoints.serve`); None: no default."""
    global _target
    url = urlparse(serve_url) if serve_url else None
    if url is None or url.port is None:
        _target = None
        return
    # Locally every node is this machine: loopback only. In a pod, the head Service
    # routes to the pod's own address.
    host = "127.0.0.1" if url.hostname in ("127.0.0.1", "localhost") else "0.0.0.0"
    _target = {"host": host, "port": url.port}
    module = sys.modules.get(_MODULE)
    if module is not None:
        _wrap(module)
    elif not any(isinstance(f, _Hook) for f in sys.meta_path):
        sys.meta_path.insert(0, _Hook())


def defaults() -> dict[str, Any] | None:
    """The HTTP options a Serve started now would get (None: Serve's own)."""
    return dict(_target) if _target else None


def _wrap(module: ModuleType) -> None:
    original = getattr(module, _FUNCTION, None)
    if original is None or getattr(original, "_raylab", False):
        return  # another Ray (or already wrapped): Serve's own defaults

    def create(http_options: Any = None, *args: Any, **kwargs: Any) -> Any:
        if http_options is None and _target is not None:
            http_options = dict(_target)
            kwargs["proxy_location"] = "HeadOnly"
        return original(http_options, *args, **kwargs)

    create._raylab = True  # type: ignore[attr-defined]
    setattr(module, _FUNCTION, create)


class _Hook(importlib.abc.MetaPathFinder):
    """Wraps Serve's start-up function as its module is loaded."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != _MODULE:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        loader = spec.loader if spec is not None else None
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return spec
        run: Callable[[ModuleType], None] = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            run(module)
            _wrap(module)

        loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec
