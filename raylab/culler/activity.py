"""Is a cluster at work? Read from the cluster's own dashboard, with its token, and from the
cell stamp its notebook kernel leaves on it.

A cluster is in use while work runs on it (checked against Ray 2.60, tests/local/test_idle.py):

- a cell running in a kernel connected to it: the kernel stamps `cell_at` on the cluster
  at most once a minute while cells run (kernel/cell_stamps.py); no request here;
- a GPU at or above `c.Raylab.gpu_busy_percent`: `GET /nodes?view=summary` serves what
  Ray's reporter agent reads through NVML (gpu_use.py), read anyway for the card;
- a Ray task or actor method running: `GET /api/v0/tasks` filtered on RUNNING (an actor
  method is a task of type ACTOR_TASK);
- a Ray Job running: its supervisor actor is alive (its entrypoint need not call Ray, so
  it shows as no task);
- a Serve app answering HTTP requests: its proxy's request count grew since the last
  sweep (serve_activity.py; the head's metrics, not the dashboard). A deployed app that
  nobody calls is not work.

A connected kernel that runs nothing is not work, nor are actors that hold GPUs and run
nothing; `c.Raylab.connected_kernel_is_work` brings back the old rule (a connected driver,
`GET /api/component_activities`) for the GPU types an admin names.

The reads stop at the first sign of work, so a busy GPU cluster costs one request and an
idle one three dashboard requests and one metrics read; a cluster without GPUs skips the
summary. A dashboard that cannot be read makes the activity "unknown", which never
suspends; one that answers without GPU figures leaves the other signals to decide.
Unreadable metrics are no evidence of Serve requests, as before Serve was read.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any, Literal

from ..auth import PROXY_HEADER, bearer
from ..backends.base import Backend
from ..errors import RaylabError
from ..model import BUSY_PERCENT, CELL_STAMP_S, ClusterInfo, GpuUse, clock_text
from ..serving.apps import APPLICATIONS, parse_details
from ..serving.model import ServeApps
from .gpu_use import SUMMARY, parse_summary
from .serve_activity import ServeRequests

State = Literal["active", "idle", "unknown"]
RUNNING_TASKS = (
    "/api/v0/tasks?filter_keys=state&filter_predicates=%3D&filter_values=RUNNING"
    "&limit=5&detail=false&timeout=5"
)
RUNNING_JOBS = (
    "/api/v0/actors?filter_keys=class_name&filter_predicates=%3D&filter_values=JobSupervisor"
    "&filter_keys=state&filter_predicates=%3D&filter_values=ALIVE&limit=5&detail=false&timeout=5"
)
DRIVERS = "/api/component_activities?timeout=5"
# Past this, a stamp from the future is not believed (a clock skew is smaller).
FUTURE_SLACK_S = 120.0
JOB_PREFIX = "_ray_internal_job_actor_"


@dataclass(frozen=True)
class Activity:
    state: State
    why: str = ""  # what made it active, or why it cannot be read
    gpu_use: GpuUse | None = None  # its GPUs as read on the way (None: not read)

    @property
    def active(self) -> bool:
        return self.state == "active"


@dataclass(frozen=True)
class Rule:
    """What counts as work for one cluster (config: the admin's, per GPU type)."""

    busy_percent: float = BUSY_PERCENT
    kernel_is_work: bool = False  # the old rule: a connected driver is work
    cell_window_s: float = CELL_STAMP_S + 60.0  # a stamp this recent: a cell runs


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
        self.serve = ServeRequests(timeout)

    def read(self, info: ClusterInfo, rule: Rule = Rule(), now: float | None = None) -> Activity:
        from .. import metrics

        now = time.time() if now is None else now
        try:
            address = self._address(info)
            token = self._token(info)
        except RaylabError as exc:
            return self._unknown(info, now, f"cannot reach the dashboard: {exc.message}")
        if not address:
            return self._unknown(info, now, "the cluster has no dashboard address")
        try:
            activity = self._read(info, rule, now, address, token)
        except _Unreadable as exc:
            metrics.DASHBOARD_REQUESTS.labels("error").inc()
            if exc.refused:
                self.forget(info)  # a new token (after a resume): read it again next time
            return self._unknown(info, now, str(exc))
        metrics.DASHBOARD_REQUESTS.labels("ok").inc()
        return activity

    def read_gpu_use(self, info: ClusterInfo, busy_percent: float = BUSY_PERCENT) -> GpuUse:
        """Only the GPUs (a card being opened): one dashboard request."""
        now = time.time()
        try:
            address = self._address(info)
            token = self._token(info)
            if not address:
                return GpuUse("unknown", now, "the cluster has no dashboard address")
            return self._gpu_use(info, address, token, now, busy_percent)
        except RaylabError as exc:
            return GpuUse("unknown", now, f"cannot reach the dashboard: {exc.message}")
        except _Unreadable as exc:
            if exc.refused:
                self.forget(info)  # a new token (after a resume): read it again next time
            return GpuUse("unknown", now, str(exc))

    def _read(
        self, info: ClusterInfo, rule: Rule, now: float, address: str, token: str | None
    ) -> Activity:
        use = None
        if info.quota_gpus > 0:
            use = self._gpu_use(info, address, token, now, rule.busy_percent)
        cell = info.cell_at
        if cell is not None and now - rule.cell_window_s <= cell <= now + FUTURE_SLACK_S:
            return Activity("active", f"a notebook cell ran at {clock_text(cell, now)}", use)
        if use is not None and use.measured and use.busy:
            top = max(use.gpus, key=lambda g: g.utilization)
            why = f"GPU {top.index} of {top.node} at {top.utilization:.0f}%"
            return Activity("active", why, use)
        tasks = _results(self._get(address, RUNNING_TASKS, token))
        if tasks:
            names = ", ".join(sorted({str(t.get("name") or "?") for t in tasks}))
            return Activity("active", f"running: {names}", use)
        jobs = _results(self._get(address, RUNNING_JOBS, token))
        if jobs:
            ids = ", ".join(str(a.get("name") or "?").removeprefix(JOB_PREFIX) for a in jobs)
            return Activity("active", f"a Ray Job is running ({ids})", use)
        if rule.kernel_is_work:
            drivers = self._get(address, DRIVERS, token)
            active = (drivers.get("driver") or {}).get("is_active")
            if active == "ACTIVE":
                return Activity("active", "a driver is connected (a notebook kernel or job)", use)
        metrics = self._metrics_address(info)
        answered = self.serve.answered(info.uid or info.name, metrics) if metrics else ""
        if answered:
            return Activity("active", f"Serve answered requests: {answered}", use)
        return Activity("idle", "", use)

    def read_serve(self, info: ClusterInfo, serve_url: str | None = None) -> ServeApps:
        """The cluster's Serve apps (one dashboard request); `serve_url`: where its
        Serve port is reached, for each app's in-cluster URL."""
        now = time.time()
        try:
            address = self._address(info)
            token = self._token(info)
            if not address:
                return ServeApps("unknown", now, why="the cluster has no dashboard address")
            body = self._get(address, APPLICATIONS, token)
        except RaylabError as exc:
            return ServeApps("unknown", now, why=f"cannot reach the dashboard: {exc.message}")
        except _Unreadable as exc:
            if exc.refused:
                self.forget(info)
            return ServeApps("unknown", now, why=str(exc))
        return parse_details(body, info.name, serve_url or info.endpoints.serve, now)

    def _metrics_address(self, info: ClusterInfo) -> str | None:
        try:
            return self.backend.metrics_address(info)
        except RaylabError:
            return None

    def _gpu_use(
        self, info: ClusterInfo, address: str, token: str | None, now: float, busy: float
    ) -> GpuUse:
        """The GPUs as the dashboard's node summary has them: one request."""
        return _said(info, parse_summary(self._get(address, SUMMARY, token), now, busy))

    def _unknown(self, info: ClusterInfo, now: float, why: str) -> Activity:
        use = GpuUse("unknown", now, why) if info.quota_gpus > 0 else None
        return Activity("unknown", why, use)

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


def _said(info: ClusterInfo, use: GpuUse) -> GpuUse:
    """No GPU figures from a cluster whose GPUs are declared, not devices: say why."""
    if use.state == "not_measured" and info.logical_gpus:
        return replace(use, why="logical GPUs")
    return use


def _results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The state API's filtered list (its `total` counts what the filter dropped too)."""
    data = body.get("data")
    result = (data.get("result") if isinstance(data, dict) else None) or {}
    items = result.get("result") if isinstance(result, dict) else None
    if not isinstance(items, list):
        raise _Unreadable("the dashboard's state API answered an unexpected shape")
    return [i for i in items if isinstance(i, dict)]


class _Unreadable(Exception):
    def __init__(self, message: str, *, refused: bool = False) -> None:
        super().__init__(message)
        self.refused = refused
