"""Which modules live_code sends by value: the notebook folder's own, never Python's own
or installed ones, even when the kernel's folder holds them all (a pod started in `/`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from raylab.kernel import live_code


@pytest.fixture
def following() -> Iterator[None]:
    yield
    live_code.stop()


def test_a_folder_that_holds_everything_sends_only_its_own_modules(
    following: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "helper_for_live_code.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    # "/": Python and every package are under it (json, logging: imported already).
    live_code.follow(Path(tmp_path.anchor))
    import helper_for_live_code  # noqa: F401  (imported after following: registered)
    from ray import cloudpickle

    by_value = cloudpickle.cloudpickle._PICKLE_BY_VALUE_MODULES
    assert "helper_for_live_code" in by_value
    for name in ("json", "logging", "pytest", "ray"):
        assert name not in by_value, name
