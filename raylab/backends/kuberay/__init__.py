"""KubeRay: clusters as RayCluster objects, read through one watch (watch.py), written
from one parameterized manifest (manifest.py, manifest_security.py), with per-cluster
tokens, NetworkPolicies and a ServiceAccount (security.py), their status read from the
operator's conditions and the pods (status.py), and the Kubernetes errors translated
into raylab's vocabulary (errors.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .backend import KubeRayBackend

__all__ = ["KubeRayBackend"]


def __getattr__(name: str) -> Any:
    # Lazily: the export and the culler import the manifest or a helper from this
    # package without loading the whole backend.
    if name == "KubeRayBackend":
        from .backend import KubeRayBackend

        return KubeRayBackend
    raise AttributeError(name)
