"""The Ray dashboard behind Jupyter's auth: HTTP and websockets, through jupyter-server-proxy.

The browser never needs a route to the cluster network; the server resolves the
cluster's dashboard address itself and refuses anyone who may not see the cluster. Ray's
token stays on the server: the proxy adds it to each request (`X-Ray-Authorization`,
which Ray's dashboard reads for proxies), drops whatever token a browser sends, and never
lets Ray's login cookie through to the browser.

The head serves whatever its owner (or a job) put there, so its pages must not run as
Jupyter: every answer is sandboxed into an opaque origin (no Jupyter cookie, XSRF token
or API for its scripts), and writes need Jupyter's XSRF token as any cookie-authenticated
write does. Jupyter's credentials never go upstream. In the sandbox a page's own requests
carry no cookie, so a browser's navigation is sent on to a key for this dashboard alone
(dashboard_keys.py).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Awaitable
from dataclasses import replace
from typing import Any
from urllib.parse import quote, urlparse

from jupyter_server.auth.decorator import ws_authenticated
from jupyter_server.auth.identity import User
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from jupyter_server_proxy import handlers as proxy_handlers
from jupyter_server_proxy.handlers import ProxyHandler
from jupyter_server_proxy.websocket import PingableWSClientConnection
from tornado import httpclient, httputil, web

from ..auth import PROXY_HEADER, TOKEN_COOKIE, bearer
from ..backends.base import Backend
from ..errors import RaylabError, SpecError
from ..identity import is_admin, may_see
from ..model import ClusterInfo, Endpoints
from ..spec import validate_name
from .cache import ClusterCache
from .dashboard_keys import MARK, DashboardKeys, Viewer
from .dashboard_page import add_storage_shim
from .handlers import owner_name, user_groups
from .paths import dashboard_path
from .proxy_request import upstream_body, without_jupyter_fields

# Jupyter's credentials are for Jupyter, and a browser's own Ray token is not trusted.
_STRIPPED = ("Authorization", "Cookie", "X-XSRFToken", PROXY_HEADER)
# Where a cluster's upstream is, and its token, by (path, uid, endpoints), kept this long.
RESOLVED_S = 10.0
# No allow-same-origin: the page gets an opaque origin of its own.
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-downloads"
_CSP = "Content-Security-Policy"


class DashboardProxyHandler(ProxyHandler):  # type: ignore[misc]  # the library is untyped
    """`<base_url>raylab/clusters/<name>/dashboard/<path>` -> the cluster's dashboard."""

    _ray_token: str | None = None
    _upstream: tuple[str, int] | None = None
    issues_keys = True  # a browser's navigation here is sent on to a key

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # jupyter-server-proxy's websocket mixin pins these to JupyterHandler's on each
        # instance (undoing refusals of an older Tornado), past any subclass: ours must run.
        for name in ("flush", "set_header"):
            self.__dict__.pop(name, None)
        self.rewrite_response = (add_storage_shim,)  # the page runs sandboxed

    def viewer(self) -> Viewer:
        return Viewer(owner_name(self), tuple(user_groups(self)))

    def base_path(self, name: str) -> str:
        """Where what this proxies is under the base URL."""
        return dashboard_path(name)

    def context_path(self, name: str) -> str:
        """Where this dashboard is under the base URL (upstream redirects are kept in it)."""
        return self.base_path(name).rstrip("/")

    upstream_name = "its dashboard"  # what an admin's write is refused through

    def upstream_address(self, backend: Backend, info: ClusterInfo) -> str | None:
        """Where this server reaches it (may open a port-forward: off the event loop)."""
        return backend.dashboard_address(info) or info.endpoints.dashboard

    def check_upstream(self, info: ClusterInfo) -> None:
        """Refuse, with why, a cluster that has none to reach now."""
        if not info.endpoints.dashboard:
            raise web.HTTPError(503, f"cluster {info.name!r} has no dashboard while {info.phase}")

    def upstream_token(self, backend: Backend, name: str) -> str | None:
        """The Ray token the proxy adds upstream (the dashboard checks it)."""
        return backend.auth_token(name)

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
        viewer = self.viewer()
        user = viewer.user
        admin = is_admin(settings, user, viewer.groups)
        if info is None or not may_see(info, user, admin):
            raise web.HTTPError(404, f"no cluster named {name!r}")
        if write and info.owner != user:
            # The proxy acts with the owner's token: an admin may look, not submit jobs.
            raise web.HTTPError(
                403, f"only {info.owner} can change {name!r} through {self.upstream_name}"
            )
        self.check_upstream(info)
        # A resumed cluster has new endpoints (local ports), so a new key.
        key = (self.base_path(name), info.uid or name, repr(info.endpoints))
        now = time.monotonic()
        # This server's (its web app's settings): not shared by servers in one process.
        resolved: dict[Any, Any] = self.settings.setdefault("raylab_resolved", {})
        known = resolved.get(key)
        if known is not None and now - known[0] < RESOLVED_S:
            address, self._ray_token = known[1], known[2]
        else:
            loop = asyncio.get_running_loop()
            # Outside Kubernetes this opens (once) a port-forward; the token may be a
            # Secret to read: both off the event loop, and remembered for a few seconds
            # (each hop to a thread costs a request a millisecond on a busy machine).
            try:
                address = await loop.run_in_executor(
                    None, self.upstream_address, cache.backend, info
                )
                self._ray_token = await loop.run_in_executor(
                    None, self.upstream_token, cache.backend, name
                )
            except RaylabError as err:
                raise web.HTTPError(err.status, err.message) from None
            for old in [k for k, v in resolved.items() if now - v[0] >= RESOLVED_S]:
                del resolved[old]
            resolved[key] = (now, address, self._ray_token)
        url = urlparse(address or "")
        if not url.hostname or not url.port:
            self.check_upstream(replace(info, endpoints=Endpoints()))
        host, port = url.hostname or "127.0.0.1", url.port or 80
        # Only this cluster's own dashboard may be reached through this route.
        self.host_allowlist = [host]
        # Jupyter's credentials are for Jupyter: never hand them to the cluster (and Ray's
        # dashboard refuses an Authorization header it did not issue). Jupyter has read
        # them (prepare) before this: the query and the body may now lose their fields.
        for header in _STRIPPED:
            self.request.headers.pop(header, None)
        self.request.query = without_jupyter_fields(self.request.query)
        self.request.body = upstream_body(self.request)
        self.proxy_base = self.context_path(name)
        return host, port

    def get_request_headers_override(self) -> dict[str, str]:
        return {PROXY_HEADER: bearer(self._ray_token)} if self._ray_token else {}

    def check_xsrf_cookie(self) -> None:
        # jupyter-server-proxy skips Jupyter's check ("defer to proxied apps"), but the
        # dashboard trusts whoever the proxy lets through: a write that Jupyter's cookie
        # authenticates must carry Jupyter's XSRF token, as everywhere else in Jupyter.
        JupyterHandler.check_xsrf_cookie(self)

    @property
    def content_security_policy(self) -> str:
        return f"{super().content_security_policy}; {SANDBOX}"

    def flush(self, include_footers: bool = False) -> Awaitable[None]:
        if not self._headers_written:
            self.isolate()
        future: Awaitable[None] = super().flush(include_footers)
        return future

    def isolate(self) -> None:
        """Headers every answer leaves with, whatever the head sent: the proxy copies the
        head's headers over the defaults (and, when streaming, starts from none)."""
        if self.content_security_policy not in self._headers.get_list(_CSP):
            self._headers.add(_CSP, self.content_security_policy)

    # Both ways the proxy copies the dashboard's headers (buffered and streamed responses).
    def add_header(self, name: str, value: Any) -> None:
        if not _token_cookie(name, value):
            super().add_header(name, value)

    def set_header(self, name: str, value: Any) -> None:
        if not _token_cookie(name, value):
            super().set_header(name, value)

    async def http_get(self, name: str, path: str = "") -> Any:
        host, port = await self._target(name)
        if self.issues_keys and _navigation(self.request):
            # A browser opening the dashboard (tab, frame, link): its page will run
            # sandboxed, without Jupyter's cookie, so it gets a key instead.
            keys: DashboardKeys = self.settings["raylab_dashboard_keys"]
            return self.redirect(self._keyed_url(name, keys.issue(self.viewer(), name), path))
        return await self.proxy(host, port, "/" + (path or ""))

    def _keyed_url(self, name: str, key: str, path: str) -> str:
        base = url_path_join(self.base_url, self.base_path(name), MARK + key)
        query = f"?{self.request.query}" if self.request.query else ""
        return f"{base}/{quote(path)}{query}"

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


class DashboardKeyHandler(DashboardProxyHandler):
    """`<base_url>raylab/clusters/<name>/dashboard/~<key>/<path>`: the same dashboard for
    its sandboxed page, whose requests carry the key in place of Jupyter's cookie."""

    _key = ""
    _viewer: Viewer | None = None
    issues_keys = False  # it has one

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        # Not Jupyter's login: here the key is the credential, and the only one.
        if not self.check_host():
            raise web.HTTPError(403)
        self._key = self.path_kwargs.pop("key")  # the methods take (name, path)
        name = self.path_kwargs["name"]
        keys: DashboardKeys = self.settings["raylab_dashboard_keys"]
        self._viewer = keys.viewer(self._key, name)
        if self._viewer is None:
            if self.request.method == "GET" and _navigation(self.request):
                # Expired, or from before this server started: through Jupyter's login.
                self.redirect(url_path_join(self.base_url, self.base_path(name)))
                return
            raise web.HTTPError(403, "this dashboard link has expired: open the dashboard again")
        self.current_user = self._jupyter_current_user = User(username=self._viewer.user)

    def viewer(self) -> Viewer:
        assert self._viewer is not None  # prepare() found it
        return self._viewer

    def context_path(self, name: str) -> str:
        return self.base_path(name) + MARK + self._key

    def check_xsrf_cookie(self) -> None:
        # No cookie authenticates here, so no cross-site form can ride on one; a page
        # that knows the key is the dashboard's own.
        return None

    def check_origin(self, origin: str | None = None) -> bool:
        # The sandbox's websockets come from the opaque origin "null"; the key decides.
        return True

    def isolate(self) -> None:
        super().isolate()
        # The sandboxed page's fetches are cross-origin and carry no credentials; and
        # the key in its URL is not sent on to the sites it links or loads from.
        self._headers["Access-Control-Allow-Origin"] = "*"
        self._headers["Referrer-Policy"] = "no-referrer"


def _navigation(request: httputil.HTTPServerRequest) -> bool:
    """A browser loading a page (a tab, a frame, a link), not a script's request."""
    return request.headers.get("Sec-Fetch-Mode") == "navigate"


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
