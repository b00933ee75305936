"""What a local cluster's nodes tell Ray to import in each worker before it takes work:
raylab's preparation, after any the user set for Ray themselves."""

from __future__ import annotations

import pytest

from raylab.backends.local.backend import PRELOAD_ENV, PRELOAD_MODULE, preload_modules


def test_raylabs_module_alone_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PRELOAD_ENV, raising=False)
    assert preload_modules() == PRELOAD_MODULE


def test_the_users_own_preloads_are_kept_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, "torch, mylib.setup,")
    assert preload_modules() == f"torch,mylib.setup,{PRELOAD_MODULE}"


def test_raylabs_module_is_named_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(PRELOAD_ENV, f"{PRELOAD_MODULE},torch")
    assert preload_modules() == f"{PRELOAD_MODULE},torch"
