"""A real Jupyter server (pytest-jupyter) with raylab, and several users in it.

`TestUsers` stands in for JupyterHub's identity: a request authenticated by the server's
token may say which hub user it is (header `X-Test-User`), so isolation between users
and the admin overview are tested inside one server. Requests without the token are
refused as usual.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from jupyter_server.auth.identity import IdentityProvider, User

# pytest-jupyter's fixtures and hooks for this folder only (its autouse fixtures make a
# new event loop and a ServerApp around every test, which the Ray tests do not need).
# `pytest_plugins` may only be declared in the top-level conftest, hence the import.
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403


class HubUser(User):
    """Shaped as jupyterhub.singleuser's JupyterHubUser: the hub's model in `hub_user`."""

    def __init__(self, name: str, groups: list[str]) -> None:
        self.hub_user = {"name": name, "groups": groups}
        super().__init__(username=name)


class TestUsers(IdentityProvider):
    async def get_user(self, handler: Any) -> Any:
        user = super().get_user(handler)
        if inspect.isawaitable(user):
            user = await user
        if user is None:
            return None
        name = handler.request.headers.get("X-Test-User")
        groups = [g for g in handler.request.headers.get("X-Test-Groups", "").split(",") if g]
        return HubUser(name, groups) if name else user


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {}


@pytest.fixture
def jp_server_config(raylab_config: dict[str, Any]) -> dict[str, Any]:
    return {
        "ServerApp": {
            "jpserver_extensions": {"raylab": True},
            "identity_provider_class": TestUsers,
            "allow_unauthenticated_access": False,
        },
        "Raylab": {"admin_users": ["admin"], **raylab_config},
    }


def as_user(name: str, groups: tuple[str, ...] = ()) -> dict[str, str]:
    return {"X-Test-User": name, "X-Test-Groups": ",".join(groups)}
