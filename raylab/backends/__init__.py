"""Backends: where clusters really run. Chosen by name; imported lazily (Ray, kubernetes)."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..errors import BackendUnavailable, SpecError

if TYPE_CHECKING:
    from ..config import Settings
    from .base import Backend

BACKENDS = ("local", "kuberay")


def make_backend(name: str, settings: Settings, watch_namespaces: Sequence[str] = ()) -> Backend:
    """`watch_namespaces`: what an admin's KubeRay backend also watches (["*"]: all)."""
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(settings.local_state_dir(), token_auth=settings.token_auth)
    if name == "kuberay":
        try:
            kuberay = importlib.import_module(".kuberay", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("raylab"):
                raise BackendUnavailable(
                    "the KubeRay backend is not part of this raylab version",
                    detail="use --backend local",
                ) from exc
            raise
        backend: Backend = kuberay.KubeRayBackend(settings, watch_namespaces=watch_namespaces)
        return backend
    raise SpecError("backend", f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
