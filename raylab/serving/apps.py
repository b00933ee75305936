"""A cluster's Serve apps from its dashboard (`GET /api/serve/applications/`, with the
cluster's token), and where each one is reached."""

from __future__ import annotations

from typing import Any

from .model import ServeApp, ServeApps

APPLICATIONS = "/api/serve/applications/"
HOW_TO_DEPLOY = (
    "deploy one from a notebook connected to the cluster: "
    "serve.run(app, route_prefix='/hello'); `%raycluster serve` lists what runs"
)


def serve_path(cluster: str) -> str:
    """A cluster's Serve apps behind the Jupyter server's proxy (server/serve_proxy.py),
    relative to its base URL, as server/paths.py writes the dashboard's."""
    return f"raylab/clusters/{cluster}/serve/"


def app_path(cluster: str, route: str | None) -> str:
    """Where the app is under Jupyter's base URL ("" for an app without a route)."""
    if route is None:
        return ""
    return serve_path(cluster) + route.lstrip("/")


def parse_details(
    body: dict[str, Any], cluster: str, serve_url: str | None, at: float
) -> ServeApps:
    """Serve's instance details as the dashboard serves them (Ray 2.60's
    `ServeInstanceDetails`): no controller means Serve was never started here."""
    apps_body = body.get("applications")
    if not isinstance(apps_body, dict):
        return ServeApps("unknown", at, why="the dashboard answered no Serve applications")
    if not body.get("controller_info") and not apps_body:
        return ServeApps("none", at)
    apps = []
    for key, app in sorted(apps_body.items()):
        if not isinstance(app, dict):
            continue
        route = app.get("route_prefix")
        route = route if isinstance(route, str) and route.startswith("/") else None
        replicas = running = 0
        for deployment in (app.get("deployments") or {}).values():
            for replica in (deployment or {}).get("replicas") or []:
                replicas += 1
                running += isinstance(replica, dict) and replica.get("state") == "RUNNING"
        url = serve_url.rstrip("/") + route if serve_url and route is not None else ""
        apps.append(
            ServeApp(
                name=str(app.get("name") or key),
                route=route,
                status=str(app.get("status") or "UNKNOWN"),
                message=str(app.get("message") or ""),
                replicas=replicas,
                running_replicas=running,
                path=app_path(cluster, route),
                in_cluster_url=url,
            )
        )
    return ServeApps("running", at, tuple(apps))
