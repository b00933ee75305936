"""raylab: Ray clusters with GPUs from a notebook in one line.

`%load_ext raylab` registers `%raycluster`. Importing this package stays cheap (Ray,
the Kubernetes client and widgets load only when a verb needs them).
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def load_ipython_extension(ipython: Any) -> None:
    from .magics import RayclusterMagics

    ipython.register_magics(RayclusterMagics)


def _jupyter_labextension_paths() -> list[dict[str, str]]:
    return [{"src": "labextension", "dest": "raylab"}]


def _jupyter_server_extension_points() -> list[dict[str, Any]]:
    # Imported here, not at the top: only a Jupyter server needs it.
    from .server.extension import RaylabExtension

    return [{"module": "raylab.server.extension", "app": RaylabExtension}]
