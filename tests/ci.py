"""A check whose tool or machine is missing: skipped on a developer's machine, saying why;
failed under CI (`CI=true`, as .ci/run sets it), so that what CI is there to check is
never passed over in silence."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """CI=true (GitHub Actions, GitLab, .ci/run), or CI=1."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def cannot_run(reason: str) -> NoReturn:
    """Skip with `reason`; under CI, fail with it instead."""
    if in_ci():
        pytest.fail(f"{reason}; CI=true, where this check must run, not be skipped", pytrace=False)
    pytest.skip(reason)
