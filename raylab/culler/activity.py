"""Is anyone using a cluster? Read from the cluster's own dashboard, with its token.

What Ray 2.60 reports, checked against a real cluster (tests/local/test_idle.py):

- `GET /api/component_activities` counts live *drivers*: a connected Ray Client kernel
  (for ~30 s after it goes, Ray Client's reconnect grace) and any script that called
  `ray.init`. It misses a submitted job whose entrypoint does not call `ray.init`, and a
  detached actor whose creator has gone.
- `GET /api/v0/actors?state=ALIVE` (the state API) lists every live actor: a running
  job's supervisor (`_ray_internal_job_actor_*`), detached actors, Serve replicas.

Running tasks need no query of their own: Ray kills a driver's tasks when it exits, so a
task runs only under a live driver or inside a live actor. No single endpoint covers
both drivers and actors, so a busy cluster costs one request (drivers first: what a
notebook user runs) and an idle one two. Both go through the token the dashboard proxy
uses (`X-Ray-Authorization`), so a culler needs nothing a user's server lacks.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any, Literal

from ..auth import PROXY_HEADER, bearer
from ..backends.base import Backend
from ..errors import RaylabError
from ..model import ClusterInfo

State = Literal["active", "idle", "unknown"]
DRIVERS = "/api/component_activities?timeout=5"
ALIVE_ACTORS = (
    "/api/v0/actors?filter_keys=state&filter_predicates=%3D&filter_values=ALIVE"
    "&limit=5&detail=false&timeout=5"
)


@dataclass(frozen=True)
class Activity:
    state: State
    why: str = ""  # what made it active, or why it cannot be read

    @property
    def active(self) -> bool:
        return self.state == "active"


class ActivityReader:
    """Reads clusters' activity; remembers each cluster's token (by uid) between sweeps,
    so reading a KubeRay cluster's activity costs no Kubernetes request after the first."""

    def __init__(self, backend: Backend, timeout: float = 5.0, address_template: str = "") -> None:
        self.backend = backend
        self.timeout = timeout
        self.address_template = address_template  # c.Raylab.culler_dashboard_url
        self._tokens: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self.requests = 0  # dashboard requests made, for the benchmark and the metrics

    def read(self, info: ClusterInfo) -> Activity:
        from .. import metrics

        try:
            address = self._address(info)
            token = self._token(info)
        except RaylabError as exc:
            return Activity("unknown", f"cannot reach the dashboard: {exc.message}")
        if not address:
            return Activity("unknown", "the cluster has no dashboard address")
        try:
            drivers = self._get(address, DRIVERS, token)
            active = (drivers.get("driver") or {}).get("is_active")
            if active == "ACTIVE":
                metrics.DASHBOARD_REQUESTS.labels("ok").inc()
                return Activity("active", "a driver is connected (a notebook kernel or job)")
            actors = self._get(address, ALIVE_ACTORS, token)
        except _Unreadable as exc:
            metrics.DASHBOARD_REQUESTS.labels("error").inc()
            if exc.refused:
                self.forget(info)  # a new token (after a resume): read it again next time
            return Activity("unknown", str(exc))
        metrics.DASHBOARD_REQUESTS.labels("ok").inc()
        result = (actors.get("data") or {}).get("result") or {}
        # `total` counts dead actors too; the filtered list is what is alive.
        alive = result.get("result") or []
        if alive:
            names = ", ".join(str(a.get("name") or a.get("class_name") or "?") for a in alive)
            return Activity("active", f"live actors: {names}")
        if active != "INACTIVE":
            return Activity("unknown", f"the dashboard reported driver activity {active!r}")
        return Activity("idle")

    def _address(self, info: ClusterInfo) -> str | None:
        if self.address_template:
            return self.address_template.format(name=info.name, namespace=info.namespace or "")
        return self.backend.dashboard_address(info) or info.endpoints.dashboard

    def forget(self, info: ClusterInfo) -> None:
        with self._lock:
            self._tokens.pop(info.uid or info.name, None)

    def _token(self, info: ClusterInfo) -> str | None:
        key = info.uid or info.name
        with self._lock:
            if key in self._tokens:
                return self._tokens[key]
        token = self.backend.auth_token(info.name)
        with self._lock:
            self._tokens[key] = token
        return token

    def _get(self, address: str, path: str, token: str | None) -> dict[str, Any]:
        headers = {PROXY_HEADER: bearer(token)} if token else {}
        request = urllib.request.Request(address.rstrip("/") + path, headers=headers)
        with self._lock:
            self.requests += 1
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            refused = exc.code in (401, 403)
            what = "refused the cluster's token" if refused else f"answered HTTP {exc.code}"
            raise _Unreadable(f"the dashboard {what}", refused=refused) from exc
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise _Unreadable(f"the dashboard is unreachable ({reason})") from exc
        except ValueError as exc:
            raise _Unreadable("the dashboard answered something other than JSON") from exc
        if not isinstance(body, dict):
            raise _Unreadable("the dashboard answered an unexpected shape")
        return body


class _Unreadable(Exception):
    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
