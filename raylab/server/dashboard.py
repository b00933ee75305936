"""The Ray dashboard behind Jupyter's auth: HTTP and websockets, through jupyter-server-proxy.

The browser never needs a route to the cluster network; the server resolves the
cluster's dashboard address itself and refuses anyone who may not see the cluster.
"""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.utils import url_path_join
from jupyter_server_proxy.handlers import ProxyHandler
from tornado import web
from tornado.httpclient import HTTPRequest
from tornado.websocket import websocket_connect

from ..errors import SpecError
from ..model import ClusterInfo
from ..spec import validate_name
from .cache import ClusterCache
from .handlers import owner_name

_JUPYTER_CREDENTIALS = ("Authorization", "Cookie", "X-XSRFToken")


class DashboardProxyHandler(ProxyHandler):  # type: ignore[misc]  # the library is untyped
    """`<base_url>raylab/clusters/<name>/dashboard/<path>` -> the cluster's dashboard."""

    async def _target(self, name: str) -> tuple[str, int]:
        try:
            validate_name(name)
        except SpecError as err:
            raise web.HTTPError(422, err.message) from None
        settings = self.settings["raylab_settings"]
        cache: ClusterCache = self.settings["raylab_cache"]
        cache.ensure_started()
        await cache.wait_synced()
        info: ClusterInfo | None = cache.get(name)
        user = owner_name(self)
        admin = user in settings.options.admin_users
        if info is None or not (admin or info.owner == user):
            raise web.HTTPError(404, f"no cluster named {name!r}")
        if not info.endpoints.dashboard:
            raise web.HTTPError(503, f"cluster {name!r} has no dashboard while {info.phase}")
        # Outside Kubernetes this opens (once) a port-forward: off the event loop.
        address = await asyncio.get_running_loop().run_in_executor(
            None, cache.backend.dashboard_address, info
        )
        url = urlparse(address or info.endpoints.dashboard)
        host, port = url.hostname or "127.0.0.1", url.port or 8265
        # Only this cluster's own dashboard may be reached through this route.
        self.host_allowlist = [host]
        # Jupyter's credentials are for Jupyter: never hand them to the cluster (and Ray's
        # dashboard refuses an Authorization header it did not issue).
        for header in _JUPYTER_CREDENTIALS:
            self.request.headers.pop(header, None)
        self.proxy_base = url_path_join("raylab", "clusters", name, "dashboard")
        return host, port

    async def http_get(self, name: str, path: str = "") -> Any:
        host, port = await self._target(name)
        return await self.proxy(host, port, "/" + (path or ""))

    async def open(self, name: str, path: str = "") -> Any:
        host, port = await self._target(name)
        # Not jupyter-server-proxy's proxy_open: its connection to the dashboard always
        # asks for permessage-deflate, and Ray's dashboard then sends nothing on the
        # socket (a job's log tail stays empty). Same relaying, without compression.
        url = self.get_client_uri("ws", host, port, "/" + (path or ""))

        def relay(message: str | bytes | None) -> None:
            if message is None:
                self.close()
            else:
                self.write_message(message, binary=isinstance(message, bytes))

        request = HTTPRequest(url, headers=self.proxy_request_headers())
        self.ws = await websocket_connect(
            request, on_message_callback=relay, subprotocols=self._requested_subprotocols
        )

    # jupyter-server-proxy's prepare() already refuses anonymous requests; the decorators
    # say so to jupyter_server's audit of unauthenticated endpoints too.
    @ws_authenticated
    async def get(self, *args: Any, **kwargs: Any) -> Any:
        return await super().get(*args, **kwargs)

    @web.authenticated
    async def post(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    @web.authenticated
    async def put(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    @web.authenticated
    async def patch(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    @web.authenticated
    async def delete(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    @web.authenticated
    async def head(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    @web.authenticated
    async def options(self, name: str, path: str = "") -> Any:
        return await self._forward(name, path)

    async def _forward(self, name: str, path: str) -> Any:
        host, port = await self._target(name)
        return await self.proxy(host, port, "/" + (path or ""))
