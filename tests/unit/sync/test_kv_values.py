"""Env values for workers in pods: what Ray's runtime env carries instead of them, and the
hook that reads them in the workers (its KV stood in for by a dict: no cluster here; the
real one is in tests/kubernetes/test_kuberay_env_values.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from ray.experimental import internal_kv

from raylab.sync import worker_kv_values
from raylab.sync.kv_values import HOOK, PACKAGE, for_pod_workers, hook_package
from raylab.sync.worker_kv_values import KEY_ENV, NAMESPACE
from raylab.sync.worker_values import SETUP_HOOK_ENV


def test_the_runtime_env_carries_a_key_and_the_hook_not_the_values(tmp_path: Path) -> None:
    env = {"working_dir": "/nb", "py_modules": ["/pkg"], "env_vars": {"TOKEN": "s3cret"}}
    shipped, put = for_pod_workers(env, tmp_path)
    assert put is not None
    key = shipped["env_vars"][KEY_ENV]
    assert shipped["env_vars"] == {KEY_ENV: key, SETUP_HOOK_ENV: HOOK}
    assert "s3cret" not in repr(shipped)
    assert shipped["working_dir"] == "/nb"
    assert shipped["py_modules"] == ["/pkg", str(hook_package(tmp_path))]
    again, _ = for_pod_workers(env, tmp_path)
    assert again["env_vars"][KEY_ENV] != key  # random, never a digest of the values
    assert for_pod_workers({"working_dir": "/nb"}, tmp_path) == ({"working_dir": "/nb"}, None)


def test_the_hook_package_needs_no_raylab(tmp_path: Path) -> None:
    package = hook_package(tmp_path)
    assert package.name == PACKAGE
    assert [p.name for p in package.iterdir()] == ["__init__.py"]
    assert hook_package(tmp_path) == package  # written once per version of the hook
    # -I: no site-packages, so no raylab; the hook imports Ray only when it runs.
    code = f"import sys; sys.path.insert(0, {str(package.parent)!r}); import {PACKAGE}"
    subprocess.run([sys.executable, "-I", "-c", code], check=True)


def test_the_hook_waits_for_values_put_after_the_worker_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    kv: dict[tuple[str, str], bytes] = {}

    def get(key: str, *, namespace: str) -> bytes | None:
        return kv.get((namespace, key))

    monkeypatch.setattr(internal_kv, "_internal_kv_get", get)
    monkeypatch.setenv(KEY_ENV, "k1")
    monkeypatch.setenv("TOKEN", "before")  # and monkeypatch restores what was
    late = threading.Timer(0.5, kv.__setitem__, ((NAMESPACE, "k1"), b'{"TOKEN": "s3cret"}'))
    late.start()
    worker_kv_values.load()
    assert os.environ["TOKEN"] == "s3cret"
    monkeypatch.setattr(worker_kv_values, "WAIT_S", 0.3)
    monkeypatch.setenv(KEY_ENV, "missing")
    with pytest.raises(RuntimeError, match="connect the kernel again"):
        worker_kv_values.load()


def test_put_goes_to_the_key_the_workers_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[Any] = []
    monkeypatch.setattr(internal_kv, "_internal_kv_put", lambda *a, **kw: calls.append((a, kw)))
    shipped, put = for_pod_workers({"env_vars": {"A": "1"}}, tmp_path)
    assert put is not None
    put()
    assert calls == [
        ((shipped["env_vars"][KEY_ENV], '{"A": "1"}'), {"overwrite": True, "namespace": NAMESPACE})
    ]
