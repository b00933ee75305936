"""A cluster's Serve apps as raylab shows them (card, `serve` verb, REST, sidebar)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

ServeState = Literal["running", "none", "unknown"]
_STATES = ("running", "none", "unknown")


@dataclass(frozen=True)
class ServeApp:
    """One application, as Serve's controller reports it through the dashboard."""

    name: str
    route: str | None  # its route prefix ("/hello"); None: no HTTP route (handles only)
    status: str  # Serve's: RUNNING, DEPLOYING, DEPLOY_FAILED, UNHEALTHY, DELETING, ...
    message: str = ""
    replicas: int = 0  # every replica of its deployments
    running_replicas: int = 0
    path: str = ""  # under Jupyter's base URL: raylab/clusters/NAME/serve/ROUTE ("": no route)
    in_cluster_url: str = ""  # straight to the cluster's Serve port ("": no route)

    @property
    def running(self) -> bool:
        return self.status == "RUNNING"


@dataclass(frozen=True)
class ServeApps:
    """`running`: Serve answered (its apps may be none yet); `none`: Serve was never
    started on the cluster; `unknown`: the dashboard could not be read (`why`)."""

    state: ServeState
    at: float
    apps: tuple[ServeApp, ...] = ()
    why: str = ""

    @property
    def running_count(self) -> int:
        return sum(1 for a in self.apps if a.running)

    def to_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "at": self.at,
            "why": self.why,
            "apps": [asdict(a) for a in self.apps],
        }

    @classmethod
    def from_json(cls, data: object) -> ServeApps | None:
        """What `to_json` wrote; None for anything else."""
        if not isinstance(data, dict) or data.get("state") not in _STATES:
            return None
        try:
            apps = tuple(
                ServeApp(
                    str(a["name"]),
                    None if a.get("route") is None else str(a["route"]),
                    str(a["status"]),
                    str(a.get("message") or ""),
                    int(a.get("replicas") or 0),
                    int(a.get("running_replicas") or 0),
                    str(a.get("path") or ""),
                    str(a.get("in_cluster_url") or ""),
                )
                for a in data.get("apps") or []
            )
            return cls(data["state"], float(data["at"]), apps, str(data.get("why") or ""))
        except (KeyError, TypeError, ValueError):
            return None


def serve_text(serve: ServeApps) -> str:
    """The card's Serve row: '2 apps · 1 running', '1 app · 1 failed', 'no apps'."""
    if serve.state == "unknown":
        return f"unknown — {serve.why}" if serve.why else "unknown"
    n = len(serve.apps)
    if not n:
        return "no apps"
    parts = [f"{n} app{'s' if n != 1 else ''}", f"{serve.running_count} running"]
    failed = sum(1 for a in serve.apps if a.status in FAILED_STATUSES)
    if failed:
        parts.append(f"{failed} failed")
    return " · ".join(parts)


FAILED_STATUSES = ("DEPLOY_FAILED", "UNHEALTHY")
