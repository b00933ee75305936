"""An identity provider that makes every token-authenticated request one named user.

JupyterHub gives a single-user server exactly one user; a plain `jupyter server` with a
token makes up a new anonymous user per request unless a cookie persists it. Loaded by
the `jupyter server` of server_process.py (by dotted name), so it imports nothing else.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

from jupyter_server.auth.identity import IdentityProvider, User


class HubUser(IdentityProvider):
    async def get_user(self, handler: Any) -> Any:
        user = super().get_user(handler)
        if inspect.isawaitable(user):
            user = await user
        return None if user is None else User(username=os.environ.get("BENCH_USER", "alice"))
