"""Backends: where clusters really run. Chosen by name; imported lazily (Ray, kubernetes)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import SpecError

if TYPE_CHECKING:
    from ..config import Settings
    from .base import Backend

BACKENDS = ("local", "kuberay")


def make_backend(name: str, settings: Settings) -> Backend:
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(settings.local_state_dir())
    if name == "kuberay":
        from .kuberay import KubeRayBackend  # type: ignore[import-not-found,unused-ignore]

        return KubeRayBackend(settings)  # type: ignore[no-any-return,unused-ignore]
    raise SpecError("backend", f"unknown backend {name!r}; choose one of: {', '.join(BACKENDS)}")
