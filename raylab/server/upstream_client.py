"""One HTTP client per event loop for the Serve proxy: connections kept alive, answers streamed.

jupyter-server-proxy makes a Tornado client per request, which opens a connection per
request (Tornado's client keeps none) and resolves even an IP address on a thread: on a
busy two-core machine that was a third of the proxy's cost (bench/bench_serve.py). No
cookies are kept: the server's requests act for different viewers (an admin's GET).
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import aiohttp

_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
    weakref.WeakKeyDictionary()
)
# Never sent on: they describe the hop, and aiohttp writes its own framing.
NOT_FORWARDED = frozenset(
    h.lower()
    for h in (
        "Content-Length",
        "Proxy-Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "TE",
        "Connection",
        "Trailer",
        "Upgrade",
        "Proxy-Authorization",
        "Proxy-Authenticate",
    )
)


def _session() -> aiohttp.ClientSession:
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=64, keepalive_timeout=30),
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=False,  # the browser gets the app's own encoding
            skip_auto_headers=("User-Agent", "Accept-Encoding"),
        )
        _sessions[loop] = session
    return session


def request(
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    *,
    connect_timeout: float,
    read_timeout: float,
) -> Any:
    """An `async with` of the upstream's response, whose body is read as it comes
    (`response.content`): a streamed answer passes through as it is made, and only a
    silence of `read_timeout` between its parts ends it. Raises asyncio.TimeoutError,
    aiohttp.ClientConnectorError (no one listens) or another aiohttp.ClientError."""
    sent = [(k, v) for k, v in headers if k.lower() not in NOT_FORWARDED]
    limits = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
    return _session().request(
        method, url, headers=sent, data=body, allow_redirects=False, timeout=limits
    )


async def close() -> None:
    """Close this loop's session (the server is stopping)."""
    session = _sessions.pop(asyncio.get_running_loop(), None)
    if session is not None:
        await session.close()
