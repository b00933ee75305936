"""A cluster's Ray Serve apps behind Jupyter's auth: `<base_url>raylab/clusters/NAME/serve/ROUTE`.

The same rules as the dashboard's proxy (dashboard.py), which this reuses: the owner's
alone (an admin may only GET, anyone else gets a 404), Jupyter's XSRF token on writes,
Jupyter's credentials never upstream, every answer sandboxed into an opaque origin (an
app's page is the owner's code, not Jupyter's), and a browser's navigation sent on to a
key for this cluster alone. What differs: the upstream is the cluster's own Serve port,
no Ray token goes with the request (an app is user code; Serve's HTTP checks none), the
page is passed on byte for byte, and a Serve that is not there or does not answer gets
a message naming it instead of a bare 599.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import aiohttp
from tornado import httputil, web

from ..backends.base import Backend
from ..model import ClusterInfo
from ..serving.apps import HOW_TO_DEPLOY, serve_path
from . import upstream_client
from .dashboard import DashboardKeyHandler, DashboardProxyHandler

CONNECT_TIMEOUT_S = 10.0
REDIRECTS = (301, 302, 303, 307, 308)
STREAM_PART = 16 * 1024  # a part smaller than this is a stream's: sent on at once
FLUSH_BYTES = 4 * 1024 * 1024


class ServeUpstream:
    """What makes a dashboard proxy a Serve proxy (mixed in before it)."""

    settings: dict[str, Any]
    path_kwargs: dict[str, Any]

    def base_path(self, name: str) -> str:
        return serve_path(name)

    def upstream_address(self, backend: Backend, info: ClusterInfo) -> str | None:
        return backend.serve_address(info)

    upstream_name = "its Serve apps"

    def check_upstream(self, info: ClusterInfo) -> None:
        if not info.endpoints.dashboard:
            raise web.HTTPError(503, f"cluster {info.name!r} serves nothing while {info.phase}")
        if not info.endpoints.serve:
            raise web.HTTPError(
                404,
                f"cluster {info.name!r} was made before raylab gave each cluster a Serve "
                "port: make it again to serve apps from it",
            )

    def upstream_token(self, backend: Backend, name: str) -> str | None:
        return None  # Ray's token is the cluster's, never an app's to read

    def _build_proxy_request(self, *args: Any, **kwargs: Any) -> Any:
        request = super()._build_proxy_request(*args, **kwargs)  # type: ignore[misc]
        request.connect_timeout = CONNECT_TIMEOUT_S
        request.request_timeout = self.settings["raylab_settings"].options.serve_timeout_s
        return request

    async def proxy(self, host: str, port: int, proxied_path: str) -> None:
        """In place of the library's (which buffers all but event streams, on a new
        connection each time): the app's answer as it comes, status and headers, then its
        body part by part (a stream, server-sent events, a large file), over kept-alive
        connections (upstream_client.py). Headers are handled as jupyter-server-proxy
        does."""
        handler: Any = self
        if not handler._check_host_allowlist(host):
            raise web.HTTPError(403, f"host {host!r} is not this cluster's")
        handler._record_activity()
        body = handler.request.body or (b"" if handler.request.method in ("POST", "PUT") else None)
        request = handler._build_proxy_request(host, port, proxied_path, body)
        sent = False
        try:
            async with upstream_client.request(
                request.method, request.url, list(request.headers.get_all()), body,
                connect_timeout=request.connect_timeout, read_timeout=request.request_timeout,
            ) as response:  # fmt: skip
                handler.set_status(response.status, response.reason or None)
                handler._headers = httputil.HTTPHeaders()
                for header, value in response.headers.items():
                    if header.lower() in ("content-length", "transfer-encoding", "connection"):
                        continue
                    if header.lower() == "location" and response.status in REDIRECTS:
                        value = handler._rewrite_location_header(value, host, port, proxied_path)
                    handler.add_header(header, value)
                pending = 0
                async for chunk in response.content.iter_any():
                    handler.write(chunk)
                    pending += len(chunk)
                    # A stream's part (small) goes out at once; a large body in parts
                    # of FLUSH_BYTES (each flush waits for the browser's socket).
                    more = not response.content.at_eof()
                    if more and (len(chunk) < STREAM_PART or pending >= FLUSH_BYTES):
                        sent, pending = True, 0
                        await handler.flush()
        except TimeoutError:
            if sent:
                raise  # mid-stream: the connection is closed, as the app's silence says
            self._upstream_failed(True, proxied_path)
        except aiohttp.ClientConnectorError:
            self._upstream_failed(False, proxied_path)
        except aiohttp.ClientError as exc:
            if sent:
                raise
            raise _JsonError(502, f"the Serve app at {proxied_path} broke the connection",
                             str(exc) or type(exc).__name__) from None  # fmt: skip
        handler._record_activity()

    def _upstream_failed(self, timed_out: bool, route: str) -> NoReturn:
        name = self.path_kwargs.get("name", "")
        if timed_out:
            timeout = self.settings["raylab_settings"].options.serve_timeout_s
            status, message = (
                504,
                f"the Serve app at {route} on {name!r} did not answer "
                + (f"within {timeout:g} s (c.Raylab.serve_timeout_s)"),
            )
            detail = "its replicas' logs (the cluster's dashboard, Serve tab) say what it waits for"
        else:
            status, message = 404, f"no Serve app is deployed on cluster {name!r}"
            detail = HOW_TO_DEPLOY
        raise _JsonError(status, message, detail)


class _JsonError(web.HTTPError):
    """An error answered as raylab's JSON ({"error", "detail"}), one line."""

    def __init__(self, status: int, message: str, detail: str) -> None:
        super().__init__(status, message)
        self.body = json.dumps({"error": message, "detail": detail})


class ServeProxyHandler(ServeUpstream, DashboardProxyHandler):
    """`<base_url>raylab/clusters/<name>/serve/<route>` -> the cluster's Serve proxy."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        _write_json_error(self, status_code, **kwargs)


class ServeKeyHandler(ServeUpstream, DashboardKeyHandler):
    """`<base_url>raylab/clusters/<name>/serve/~<key>/<route>`: the sandboxed page's own
    requests, with the key in place of Jupyter's cookie (dashboard_keys.py)."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        _write_json_error(self, status_code, **kwargs)


def _write_json_error(handler: web.RequestHandler, status_code: int, **kwargs: Any) -> None:
    exc = kwargs.get("exc_info", (None, None, None))[1]
    if isinstance(exc, _JsonError):
        handler.set_header("Content-Type", "application/json")
        handler.finish(exc.body + "\n")
        return
    if isinstance(exc, web.HTTPError) and exc.log_message:
        message = exc.log_message % exc.args if exc.args else exc.log_message
        handler.set_header("Content-Type", "application/json")
        handler.finish(json.dumps({"error": message}) + "\n")
        return
    web.RequestHandler.write_error(handler, status_code, **kwargs)
