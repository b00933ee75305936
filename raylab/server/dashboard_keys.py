"""Keys that open one cluster's dashboard for one viewer, in place of Jupyter's cookie.

A proxied page runs sandboxed in an opaque origin (dashboard.py), so the browser sends no
cookie with its requests: the page's scripts, styles and API calls would all be refused.
A browser that navigates to the dashboard through Jupyter's login is sent on to
`dashboard/~KEY/`, and the page's relative URLs carry the key. The key is worth no more
than the page already is: the dashboard of this cluster, as this viewer (an admin still
only looks). It is in this server's memory only; a browser that comes back with an
unknown or expired one is sent through Jupyter's login again.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

LIFETIME_S = 8 * 3600.0  # a working day; the page's polling does not extend it
MARK = "~"  # before the key in the path: no path of Ray's dashboard starts with it


@dataclass(frozen=True)
class Viewer:
    """Who a request acts for, as the proxy decides what it may do."""

    user: str
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Grant:
    viewer: Viewer
    cluster: str
    expires: float


class DashboardKeys:
    def __init__(
        self, lifetime_s: float = LIFETIME_S, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.lifetime_s = lifetime_s
        self.clock = clock
        self._grants: dict[str, _Grant] = {}
        self._lock = threading.Lock()

    def issue(self, viewer: Viewer, cluster: str) -> str:
        key = secrets.token_urlsafe(32)
        now = self.clock()
        with self._lock:
            self._grants = {k: g for k, g in self._grants.items() if g.expires > now}
            self._grants[key] = _Grant(viewer, cluster, now + self.lifetime_s)
        return key

    def viewer(self, key: str, cluster: str) -> Viewer | None:
        """Whom `key` lets see `cluster`'s dashboard; None for any other cluster."""
        with self._lock:
            grant = self._grants.get(key)
        if grant is None or grant.cluster != cluster or grant.expires <= self.clock():
            return None
        return grant.viewer
