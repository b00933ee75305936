"""The Ray dashboard behind Jupyter's auth: HTTP and websockets, through jupyter-server-proxy.

The browser never needs a route to the cluster network; the server resolves the
cluster's dashboard address itself and refuses anyone who may not see the cluster. Ray's
token stays on the server: the proxy adds it to each request (`X-Ray-Authorization`,
which Ray's dashboard reads for proxies), drops whatever token a browser sends, and never
lets Ray's login cookie through to the browser.
"""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any
from urllib.parse import urlparse

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server_proxy import handlers as proxy_handlers
from jupyter_server_proxy.handlers import ProxyHandler
from jupyter_server_proxy.websocket import PingableWSClientConnection
from tornado import httpclient, httputil, web

from ..auth import PROXY_HEADER, TOKEN_COOKIE, bearer
from ..errors import RaylabError, SpecError
from ..identity import is_admin, may_see
from ..model import ClusterInfo
from ..spec import validate_name
from .cache import ClusterCache
from .handlers import owner_name, user_groups
from .paths import dashboard_path

# Jupyter's credentials are for Jupyter, and a browser's own Ray token is not trusted.
_STRIPPED = ("Authorization", "Cookie", "X-XSRFToken", PROXY_HEADER)


class DashboardProxyHandler(ProxyHandler):  # type: ignore[misc]  # the library is untyped
    """`<base_url>raylab/clusters/<name>/dashboard/<path>` -> the cluster's dashboard."""

    _ray_token: str | None = None
    _upstream: tuple[str, int] | None = None

    async def _target(self, name: str, *, write: bool = False) -> tuple[str, int]:
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
        admin = is_admin(settings, user, user_groups(self))
        if info is None or not may_see(info, user, admin):
            raise web.HTTPError(404, f"no cluster named {name!r}")
        if write and info.owner != user:
            # The proxy acts with the owner's token: an admin may look, not submit jobs.
            raise web.HTTPError(403, f"only {info.owner} can change {name!r} through its dashboard")
        if not info.endpoints.dashboard:
            raise web.HTTPError(503, f"cluster {name!r} has no dashboard while {info.phase}")
        loop = asyncio.get_running_loop()
        # Outside Kubernetes this opens (once) a port-forward; the token may be a Secret to
        # read: both off the event loop.
        address = await loop.run_in_executor(None, cache.backend.dashboard_address, info)
        try:
            self._ray_token = await loop.run_in_executor(None, cache.backend.auth_token, name)
        except RaylabError as err:
            raise web.HTTPError(err.status, err.message) from None
        url = urlparse(address or info.endpoints.dashboard)
        host, port = url.hostname or "127.0.0.1", url.port or 8265
        # Only this cluster's own dashboard may be reached through this route.
        self.host_allowlist = [host]
        # Jupyter's credentials are for Jupyter: never hand them to the cluster (and Ray's
        # dashboard refuses an Authorization header it did not issue).
        for header in _STRIPPED:
            self.request.headers.pop(header, None)
        self.proxy_base = dashboard_path(name).rstrip("/")
        return host, port

    def get_request_headers_override(self) -> dict[str, str]:
        return {PROXY_HEADER: bearer(self._ray_token)} if self._ray_token else {}

    # Both ways the proxy copies the dashboard's headers (buffered and streamed responses).
    def add_header(self, name: str, value: Any) -> None:
        if not _token_cookie(name, value):
            super().add_header(name, value)

    def set_header(self, name: str, value: Any) -> None:
        if not _token_cookie(name, value):
            super().set_header(name, value)

    async def http_get(self, name: str, path: str = "") -> Any:
        host, port = await self._target(name)
        return await self.proxy(host, port, "/" + (path or ""))

    async def open(self, name: str, path: str = "") -> Any:
        host, port = self._upstream or await self._target(name)
        _uncompressed.set(True)  # this task only: see _connect_upstream
        return await self.proxy_open(host, port, "/" + (path or ""))

    # jupyter-server-proxy's prepare() already refuses anonymous requests; the decorators
    # say so to jupyter_server's audit of unauthenticated endpoints too.
    @ws_authenticated
    async def get(self, name: str, path: str = "") -> Any:
        if self.request.headers.get("Upgrade", "").lower() == "websocket":
            # Refuse (404, 503) before the handshake: after it, an error only closes.
            self._upstream = await self._target(name)
        return await super().get(name, path)

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
        host, port = await self._target(name, write=self.request.method not in ("HEAD", "OPTIONS"))
        return await self.proxy(host, port, "/" + (path or ""))


def _token_cookie(name: str, value: Any) -> bool:
    return name.lower() == "set-cookie" and str(value).lstrip().startswith(f"{TOKEN_COOKIE}=")


# jupyter-server-proxy offers permessage-deflate to the upstream server; Ray's dashboard
# (aiohttp) accepts, and Tornado's client then drops the dashboard's first messages (a
# job's log tail came back empty). For our proxy only, the upstream link is uncompressed;
# the browser's own link to Jupyter may still be compressed.
_uncompressed: contextvars.ContextVar[bool] = contextvars.ContextVar("raylab_ws", default=False)
_library_connect = proxy_handlers.pingable_ws_connect


def _connect_upstream(
    request: Any = None,
    on_message_callback: Any = None,
    on_ping_callback: Any = None,
    subprotocols: Any = None,
    resolver: Any = None,
) -> Any:
    if not _uncompressed.get():
        return _library_connect(
            request=request, on_message_callback=on_message_callback,
            on_ping_callback=on_ping_callback, subprotocols=subprotocols, resolver=resolver,
        )  # fmt: skip
    request.headers = httputil.HTTPHeaders(request.headers)
    request = httpclient._RequestProxy(request, httpclient.HTTPRequest._DEFAULTS)
    conn = PingableWSClientConnection(
        request=request,
        compression_options=None,
        on_message_callback=on_message_callback,
        on_ping_callback=on_ping_callback,
        max_message_size=10 * 1024 * 1024,
        subprotocols=subprotocols,
        **({"resolver": resolver} if resolver else {}),
    )
    return conn.connect_future


proxy_handlers.pingable_ws_connect = _connect_upstream
