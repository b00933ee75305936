"""One HTTP client per event loop for the Serve proxy, with connections kept alive.

jupyter-server-proxy makes a Tornado client per request, which opens a connection per
request (Tornado's client keeps none) and resolves even an IP address on a thread: on a
busy two-core machine that was a third of the proxy's cost (bench/bench_serve.py). No
cookies are kept: the server's requests act for different viewers (an admin's GET).
"""

from __future__ import annotations

import asyncio
import weakref
from dataclasses import dataclass

import aiohttp
from multidict import CIMultiDictProxy

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


@dataclass(frozen=True)
class Answer:
    status: int
    reason: str
    headers: CIMultiDictProxy[str]
    body: bytes


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


async def fetch(
    method: str,
    url: str,
    headers: list[tuple[str, str]],
    body: bytes | None,
    *,
    connect_timeout: float,
    timeout: float,
) -> Answer:
    """The whole answer; raises asyncio.TimeoutError, aiohttp.ClientConnectorError (no one
    listens) or another aiohttp.ClientError (the connection broke)."""
    sent = [(k, v) for k, v in headers if k.lower() not in NOT_FORWARDED]
    limits = aiohttp.ClientTimeout(total=timeout, connect=connect_timeout)
    async with _session().request(
        method, url, headers=sent, data=body, allow_redirects=False, timeout=limits
    ) as response:
        data = await response.read()
        return Answer(response.status, response.reason or "", response.headers, data)
