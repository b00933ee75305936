"""`%raycluster serve`: a cluster's Serve apps as a table, with where each is reached."""

from __future__ import annotations

from ..serving.model import ServeApps


def serve_table(serve: ServeApps, base_url: str) -> str:
    """NAME ROUTE STATUS REPLICAS URL IN-CLUSTER URL; `base_url` is Jupyter's (the URL
    through Jupyter is that plus the app's path), '' where this process cannot tell."""
    rows = [("NAME", "ROUTE", "STATUS", "REPLICAS", "URL", "IN-CLUSTER URL")]
    for app in serve.apps:
        through = (base_url.rstrip("/") + "/" + app.path) if app.path else "—"
        rows.append(
            (
                app.name,
                app.route or "—",
                app.status,
                f"{app.running_replicas}/{app.replicas}",
                through,
                app.in_cluster_url or "—",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    for app in serve.apps:
        if app.message and app.status != "RUNNING":
            lines.append(f"{app.name}: {app.message.splitlines()[0][:300]}")
    return "\n".join(lines)
