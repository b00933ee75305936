"""An admin's Jupyter server on KubeRay with `admin_watch_namespaces = ["*"]`, seen through
its REST API: alice's and bob's clusters, both named `exp`, each in its own namespace, in
one overview with their owners; the admin manages bob's by its namespaced path, which is
a plain 404 for anyone else."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from kubernetes import client as k8s_client
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.spec import ClusterSpec
from tests.server.conftest import as_user

from .admin_support import kubeconfig_with, overview_admin, user_namespaces
from .kuberay_support import settings
from .server_support import server_config, until

SETTINGS = settings()
SMALL = {"workers": 0, "cpus": "100m", "memory": "256Mi"}  # a head alone


@pytest.fixture(scope="module")
def spaces(admin_api: k8s_client.ApiClient) -> Iterator[tuple[str, str, str]]:
    with user_namespaces(admin_api) as made:
        yield made


@pytest.fixture(scope="module")
def admin_token(admin_api: k8s_client.ApiClient, spaces: tuple[str, str, str]) -> Iterator[str]:
    with overview_admin(admin_api, spaces[0]) as token:
        yield token


@pytest.fixture
def jp_server_config(
    control_plane: ControlPlane,
    spaces: tuple[str, str, str],
    admin_token: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    """The admin's own server: its service account's kubeconfig, its home namespace."""
    kubeconfig = kubeconfig_with(control_plane, admin_token, spaces[0], tmp_path / "kc")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("JUPYTERHUB_USER", "admin")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    return server_config(admin_users=["admin"], admin_watch_namespaces=["*"])


def test_the_admin_sees_and_manages_every_users_cluster(
    jp_fetch: Any,
    jp_asyncio_loop: Any,
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
    spaces: tuple[str, str, str],
) -> None:
    _, a, b = spaces
    alice = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=a)
    bob = KubeRayBackend(SETTINGS, api_client=bob_api, namespace=b)
    exp = ClusterSpec.from_mapping({"name": "exp", **SMALL}, SETTINGS.profiles)
    alice.create(exp, "alice")
    bob.create(exp, "bob")

    async def call(user: str, *path: str, **kw: Any) -> Any:
        reply = await jp_fetch("raylab", *path, headers=as_user(user), **kw)
        return json.loads(reply.body) if reply.body else None

    async def overview() -> dict[tuple[str, str], dict[str, Any]]:
        body = await call("admin", "clusters", params={"all": "1"})
        return {(c["namespace"], c["name"]): c for c in body["clusters"]
                if c["namespace"] in spaces}  # fmt: skip

    async def scenario() -> None:
        async def both_ready() -> Any:
            seen = await overview()
            return len(seen) == 2 and all(c["phase"] == "Ready" for c in seen.values())

        await until(both_ready, "alice's and bob's exp Ready", jp_fetch, timeout=120)
        seen = await overview()
        assert {k: c["owner"] for k, c in seen.items()} == {(a, "exp"): "alice", (b, "exp"): "bob"}

        # The admin's home namespace, where `clusters/NAME` points (the sidebar's rule:
        # clusters elsewhere are reached by `namespaces/NS/clusters/NAME`).
        assert (await call("admin", "profiles"))["namespace"] == spaces[0]

        his = (await call("admin", "namespaces", b, "clusters", "exp"))["cluster"]
        assert (his["owner"], his["namespace"]) == ("bob", b)
        # Its dashboard is not behind this server's proxy (that serves its own namespace).
        assert his["dashboard_path"] is None
        # The name alone means the admin's own namespace, where there is no exp.
        with pytest.raises(HTTPClientError) as err:
            await call("admin", "clusters", "exp")
        assert err.value.code == 404
        # Anyone else asking this server for a namespaced path: a plain 404.
        with pytest.raises(HTTPClientError) as err:
            await call("bob", "namespaces", b, "clusters", "exp")
        assert err.value.code == 404
        assert json.loads(err.value.response.body)["error"] == "no cluster named 'exp'"

        suspended = await call(
            "admin", "namespaces", b, "clusters", "exp", method="PATCH",
            body=json.dumps({"suspend": True}),
        )  # fmt: skip
        assert suspended["cluster"]["namespace"] == b

        async def bobs_suspended() -> Any:
            seen = await overview()
            return seen[(b, "exp")]["phase"] == "Suspended" and seen

        seen = await until(bobs_suspended, "bob's exp Suspended", jp_fetch)
        assert seen[(a, "exp")]["phase"] == "Ready"

        await call("admin", "namespaces", b, "clusters", "exp", method="DELETE")

        async def bobs_gone() -> Any:
            seen = await overview()
            return (b, "exp") not in seen and seen

        seen = await until(bobs_gone, "bob's exp gone", jp_fetch)
        assert list(seen) == [(a, "exp")]
        assert bob.get("exp") is None  # gone for bob too, not only from the overview

    try:
        # pytest-jupyter's hook that runs async tests lives in tests/server's conftest only.
        jp_asyncio_loop.run_until_complete(scenario())
    finally:
        for backend in (alice, bob):
            if backend.get("exp") is not None:
                backend.delete("exp", propagation="Background")
