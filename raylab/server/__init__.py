"""Jupyter server extension: raylab's REST API under `<base_url>raylab/`."""

from __future__ import annotations

from typing import Any


def _load_jupyter_server_extension(serverapp: Any) -> None:
    from .extension import load

    load(serverapp)


# jupyter_server looks the loader up by this name too.
load_jupyter_server_extension = _load_jupyter_server_extension
