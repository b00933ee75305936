"""Fixtures the local backend's kernel tests share."""

from __future__ import annotations

import pytest
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    """The in-process IPython shell with raylab loaded, as `%load_ext raylab` leaves a kernel."""
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raylab")
    return ip
