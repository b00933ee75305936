"""The server extension loads in a real Jupyter server and serves GPU profiles."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

pytest_plugins = ["pytest_jupyter.jupyter_server"]


@pytest.fixture
def jp_server_config() -> dict[str, Any]:
    return {
        "ServerApp": {"jpserver_extensions": {"raylab": True}},
        "Raylab": {"max_gpus_per_user": 8, "default_gpu_type": "h100"},
    }


async def test_profiles_reflect_the_admins_config(jp_fetch: Any) -> None:
    resp = await jp_fetch("raylab", "profiles")
    body = json.loads(resp.body)
    assert [p["name"] for p in body["gpu_types"]] == ["a100", "h100", "l4", "cpu"]
    assert body["defaults"]["gpu_type"] == "h100"
    assert body["quota"]["max_gpus_per_user"] == 8
    assert body["backend"] == "local"


async def test_unauthenticated_requests_are_refused(jp_fetch: Any) -> None:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", "profiles", headers={"Authorization": ""})
    assert err.value.code == 403
