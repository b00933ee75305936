"""The server extension over KubeRay when Kubernetes goes away and comes back.

A real Jupyter server (pytest-jupyter) runs raylab as alice (the documented Role) against
the real control plane. With the API server stopped: reads still answer from the cache,
with the cluster and its last status and `available: false` naming the cause; writes get
503 saying Kubernetes cannot be reached; the event stream says so too. When the API server
returns, everything recovers without restarting anything of raylab.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from tests.server.conftest import TestUsers, as_user

from .kuberay_support import grant, new_namespace
from .kuberay_support import user_kubeconfig as kubeconfig_for


@pytest.fixture(scope="module")
def alice_namespace(control_plane: ControlPlane) -> Iterator[str]:
    admin = control_plane.api_client("admin")
    with new_namespace(admin, "srv") as namespace:
        grant(admin, namespace, "alice")
        yield namespace


@pytest.fixture
def jp_server_config(
    control_plane: ControlPlane,
    alice_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    kubeconfig = kubeconfig_for(control_plane.kubeconfig("alice"), alice_namespace, tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    return {
        "ServerApp": {
            "jpserver_extensions": {"raylab": True},
            "identity_provider_class": TestUsers,
        },
        "Raylab": {"backend": "kuberay"},
    }


def as_alice(jp_fetch: Any) -> Any:
    """jp_fetch as the hub user alice (the token alone gives a new anonymous user each time)."""

    def fetch(*path: str, **kw: Any) -> Any:
        return jp_fetch(*path, headers=as_user("alice"), **kw)

    return fetch


async def get(jp_fetch: Any, *path: str) -> Any:
    return json.loads((await jp_fetch("raylab", *path)).body)


async def until(probe: Any, what: str, jp_fetch: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = await probe()
        if value:
            return value
        await asyncio.sleep(0.25)
    last = await get(jp_fetch, "clusters")
    raise AssertionError(f"timed out waiting for {what}; the server says {last}")


def test_outage_then_recovery(
    jp_fetch: Any, jp_asyncio_loop: Any, control_plane: ControlPlane
) -> None:
    # pytest-jupyter's hook that runs async tests lives in tests/server's conftest only.
    jp_asyncio_loop.run_until_complete(outage_then_recovery(as_alice(jp_fetch), control_plane))


async def outage_then_recovery(jp_fetch: Any, control_plane: ControlPlane) -> None:
    made = await jp_fetch(
        "raylab", "clusters", method="POST", body=json.dumps({"name": "out1", "workers": 1})
    )
    assert made.code == 201

    async def ready() -> Any:
        body = await get(jp_fetch, "clusters")
        return [c for c in body["clusters"] if c["name"] == "out1" and c["phase"] == "Ready"]

    await until(ready, "out1 Ready", jp_fetch, timeout=120)

    control_plane.stop_apiserver()
    try:

        async def unreachable() -> Any:
            body = await get(jp_fetch, "clusters")
            return body if body["available"] is False else None

        body = await until(unreachable, "the server to notice the outage", jp_fetch, timeout=30)
        assert "cannot reach Kubernetes" in body["error"]
        # Nothing lost: the cluster is still listed, with its last known status.
        assert [(c["name"], c["phase"]) for c in body["clusters"]] == [("out1", "Ready")]

        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("raylab", "clusters", method="POST", body=json.dumps({"name": "out2"}))
        assert err.value.code == 503
        detail = json.loads(err.value.response.body if err.value.response else b"{}")
        assert "cannot reach Kubernetes" in detail["error"]
    finally:
        control_plane.start_apiserver()

    async def back() -> Any:
        body = await get(jp_fetch, "clusters")
        return body if body["available"] else None

    body = await until(back, "recovery", jp_fetch, timeout=90)
    assert body["error"] is None
    assert [c["name"] for c in body["clusters"]] == ["out1"]
    deleted = await jp_fetch("raylab", "clusters", "out1", method="DELETE")
    assert deleted.code == 204
