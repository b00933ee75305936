"""Words and tables for clusters, shared by the magics, the CLI and the status card.

The sidebar uses the same wording (phase, "Pending — reason", "1/2 workers ready").
"""

from __future__ import annotations

import html
import time

from ..model import (
    RUNNING_PHASES,
    ClusterEnvironment,
    ClusterInfo,
    GpuUse,
    Phase,
    QueueInfo,
    UsageRow,
    clock_text,
    duration_text,
    format_age,
    format_size,
    suspension_reason,
)
from ..serving.model import serve_text

COLUMNS = ("NAME", "PHASE", "WORKERS", "GPUS", "GPU USE", "CPU/MEM PER WORKER", "AGE", "IDLE")


def suspended_text(info: ClusterInfo, now: float | None = None) -> str:
    """Why the culler suspended it ('' if it did not): kept until `resume`."""
    if info.phase != Phase.SUSPENDED:
        return ""
    return suspension_reason(info.idle, now)


def idle_text(info: ClusterInfo, now: float | None = None) -> str:
    """'idle for 50 min; suspends at 14:05', 'activity unknown since 14:05 (why)', or ''."""
    idle, now = info.idle, now or time.time()
    if info.phase not in RUNNING_PHASES:
        return suspended_text(info, now)
    if idle.unknown_since is not None:
        why = f" ({idle.unknown_reason})" if idle.unknown_reason else ""
        return f"activity unknown since {clock_text(idle.unknown_since, now)}{why}"
    if idle.since is None:
        return ""
    text = f"idle for {duration_text(now - idle.since)}"
    if idle.suspend_at is not None:
        text += f"; suspends at {clock_text(idle.suspend_at, now)}"
    return text


def standby_text(info: ClusterInfo, now: float | None = None) -> str:
    """'standby until 14:05' for a standby ('' for any other cluster)."""
    if info.standby_until is None:
        return ""
    return f"standby until {clock_text(info.standby_until, now)}"


def phase_text(info: ClusterInfo, limit: int | None = None, now: float | None = None) -> str:
    reason = "; ".join(
        t for t in (standby_text(info, now), suspended_text(info, now) or info.reason) if t
    )
    if limit is not None and len(reason) > limit:
        reason = reason[: limit - 1] + "…"
    return f"{info.phase} — {reason}" if reason else str(info.phase)


def gpus_text(info: ClusterInfo) -> str:
    if not info.spec.gpus:
        return "none"
    text = f"{info.gpus} × {info.spec.gpu_type}"
    return text + " (logical)" if info.logical_gpus else text


def _half_up(x: float) -> int:
    return int(x + 0.5)  # as render.ts's Math.floor(x + 0.5): both doors print the same


def gpu_use_text(use: GpuUse) -> str:
    """The card's GPU use row: '87% · 61/160 GiB · 2 of 2 busy', or '—, logical GPUs'.
    Never 0 % for what was not measured."""
    if not use.measured:
        return f"—, {use.why or 'not measured'}"
    used = sum(g.memory_used_mib for g in use.gpus) / 1024
    total = sum(g.memory_total_mib for g in use.gpus) / 1024
    return (
        f"{_half_up(use.utilization)}% · {_half_up(used)}/{_half_up(total)} GiB · "
        f"{use.busy} of {len(use.gpus)} busy"
    )


def gpu_use_cell(info: ClusterInfo) -> str:
    """The list's GPU USE column: '87% · 2/2 busy', '—' where not read or not measured."""
    use = info.gpu_use
    if use is None or not use.measured:
        return "—" if info.quota_gpus else ""
    return f"{_half_up(use.utilization)}% · {use.busy}/{len(use.gpus)} busy"


def workers_text(info: ClusterInfo) -> str:
    return f"{info.workers_ready}/{info.workers_desired}"


def row(info: ClusterInfo, *, owner: bool = False) -> list[str]:
    cells = [
        info.name,
        phase_text(info, limit=60),
        workers_text(info),
        gpus_text(info),
        gpu_use_cell(info),
        f"{info.spec.cpus} / {info.spec.memory}",
        format_age(info.age()),
        idle_text(info),
    ]
    return [*cells, info.owner] if owner else cells


def text_table(clusters: list[ClusterInfo], *, owner: bool = False) -> str:
    if not clusters:
        return "No clusters. Create one with `%raycluster up` (or `raylab up`)."
    header = [*COLUMNS, "OWNER"] if owner else list(COLUMNS)
    rows = [header, *(row(c, owner=owner) for c in clusters)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows
    )


def html_table(clusters: list[ClusterInfo], *, owner: bool = False) -> str:
    if not clusters:
        return f"<p>{html.escape(text_table([]))}</p>"
    header = [*COLUMNS, "OWNER"] if owner else list(COLUMNS)
    head = "".join(f"<th>{html.escape(h.title())}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row(i, owner=owner)) + "</tr>"
        for i in clusters
    )
    return (
        f'<table class="raylab-table"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'
    )


def summary(info: ClusterInfo) -> str:
    """One line: what the cluster is and where it stands."""
    parts = [
        info.name,
        phase_text(info),
        f"{workers_text(info)} workers ready",
        f"GPUs {gpus_text(info)}",
    ]
    return "  ·  ".join(parts)


def environment_text(env: ClusterEnvironment) -> str:
    """One line: "working dir 3.2 MiB · 4 pip packages · 2 env vars" (render.ts too)."""
    parts = []
    if env.working_dir is not None:
        parts.append(f"working dir {format_size(env.working_dir_bytes)}")
    local = len(env.local_packages) + len(env.wheels)
    if local:
        parts.append(_count(local, "local package"))
    if env.pip:
        parts.append(_count(len(env.pip), "pip package"))
    if env.env_names:
        parts.append(_count(len(env.env_names), "env var"))
    return " · ".join(parts) or "nothing synced"


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def card_fields(
    info: ClusterInfo,
    started: float | None = None,
    *,
    now: float | None = None,
    owner: bool = False,
) -> list[tuple[str, str]]:
    """The card's rows, in order: the notebook card, the terminal card and the sidebar
    (`cardFields` in render.ts) all show these. tests/packaging/card_rows.json holds
    clusters and the rows both languages must make of them.

    `started`: while `up` waits, "Elapsed" replaces "Age". `owner`: the admins' view.
    """
    now = now if now is not None else time.time()
    fields = [("Phase", phase_text(info, now=now)), ("Workers", f"{workers_text(info)} ready")]
    if info.spec.max_workers is not None:
        low = info.spec.min_workers or 0
        fields.append(("Autoscaling", f"{low}–{info.spec.max_workers} workers"))  # noqa: RUF001 (a range)
    fields.append(("GPUs", gpus_text(info)))
    if info.gpu_use is not None:
        fields.append(("GPU use", gpu_use_text(info.gpu_use)))
    fields.append(("Per worker", f"{info.spec.cpus} CPU · {info.spec.memory} memory"))
    if started is not None:
        fields.append(("Elapsed", f"{int(max(0.0, now - started))}s"))
    else:
        fields.append(("Age", format_age(info.age(now))))
    if owner:
        fields.append(("Owner", info.owner))
    if info.queue is not None:
        fields.append(("Queue", queue_text(info.queue)))
    if info.ray_version:
        fields.append(("Ray", f"{info.ray_version} · Python {info.python_version or '?'}"))
    if info.environment is not None:
        fields.append(("Environment", environment_text(info.environment)))
    connection = connection_text(info)
    if connection:
        fields.append(("Connection", connection))
    if info.serve is not None and info.serve.state != "none":  # never started: no row
        fields.append(("Serve", serve_text(info.serve)))
    idle = idle_text(info, now)
    if idle and not suspended_text(info):  # a suspension's reason is in the phase already
        fields.append(("Idle", idle))
    return fields


def queue_text(queue: QueueInfo) -> str:
    """The card's Queue row: which Kueue queue, at what priority (the place is in the
    phase's reason, which changes as the queue moves)."""
    text = f"{queue.name} → {queue.cluster_queue}" if queue.cluster_queue else queue.name
    return f"{text} · priority {queue.priority}" if queue.priority else text


def connection_text(info: ClusterInfo) -> str:
    """How a kernel on this server reaches the cluster: as a direct Ray driver where its
    nodes can reach the kernel back (the local backend), else through Ray Client."""
    if info.endpoints.gcs:
        return f"Ray driver at {info.endpoints.gcs}"
    if info.endpoints.client:
        return f"Ray Client at {info.endpoints.client}"
    return ""


def keep_running_hint(info: ClusterInfo, prog: str = "%raycluster") -> str:
    """What a warned owner can do ('' unless a suspension is announced)."""
    if info.idle.suspend_at is None or info.phase not in RUNNING_PHASES:
        return ""
    return f"`{prog} keep {info.name}` keeps it running (or use it: any job or kernel)"


def usage_table(rows: list[UsageRow], since: float, *, everyone: bool) -> str:
    """GPU-hours per user and GPU type since `since`."""
    period = f"since {time.strftime('%Y-%m-%d %H:%M', time.localtime(since))}"
    if not rows:
        return f"No GPU-hours {period}."
    header = ["USER", "GPU TYPE", "CLUSTERS", "GPU-HOURS", "USED", "USED/HELD"]
    body = [
        [r.owner, r.gpu_type, str(r.clusters), f"{r.gpu_hours:.2f}", *_used_cells(r)] for r in rows
    ]
    if everyone or len(rows) > 1:
        total = UsageRow(
            "total", "", sum(r.clusters for r in rows), sum(r.gpu_hours for r in rows),
            sum(r.used_gpu_hours for r in rows), sum(r.measured_gpu_hours for r in rows),
        )  # fmt: skip
        body.append(["total", "", str(total.clusters), f"{total.gpu_hours:.2f}",
                     *_used_cells(total)])  # fmt: skip
    table = [header, *body]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in table]
    return f"GPU-hours {period}:\n" + "\n".join(lines)


def _used_cells(row: UsageRow) -> list[str]:
    """USED and USED/HELD: '—' where use was never read (logical GPUs, older records);
    the share is of the held hours whose use was read (one word each: scripts split it)."""
    share = row.used_share
    if share is None:
        return ["—", "—"]
    return [f"{row.used_gpu_hours:.2f}", f"{share:.0%}"]


def connect_code(info: ClusterInfo) -> str:
    """What to type elsewhere to use this cluster."""
    return (
        f"%load_ext raylab\n%raycluster connect {info.name}\n"
        f"# or, in a shell holding what `raylab env {info.name}` prints: "
        f'ray.init("{info.endpoints.client}")'
    )


PHASE_COLORS = {
    # JupyterLab theme variables: right in light and dark themes alike.
    Phase.READY: "var(--jp-success-color1)",
    Phase.STARTING: "var(--jp-info-color1)",
    Phase.QUEUED: "var(--jp-warn-color1)",
    Phase.PENDING: "var(--jp-warn-color1)",
    Phase.DEGRADED: "var(--jp-warn-color1)",
    Phase.SUSPENDED: "var(--jp-layout-color3)",
    Phase.FAILED: "var(--jp-error-color1)",
    Phase.DELETING: "var(--jp-layout-color3)",
}


def card_html(info: ClusterInfo, started: float | None = None, note: str = "") -> str:
    color = PHASE_COLORS.get(info.phase, "var(--jp-layout-color3)")
    rows = "".join(
        f'<tr><th style="text-align:left;padding-right:1em">{html.escape(k)}</th>'
        f'<td style="text-align:left">{html.escape(v)}</td></tr>'
        for k, v in card_fields(info, started)
    )
    note_html = f"<div>{html.escape(note)}</div>" if note else ""
    return (
        '<div class="raylab-card" style="border:1px solid var(--jp-border-color2);'
        'border-radius:4px;padding:6px 10px;display:inline-block">'
        f'<div><b>{html.escape(info.name)}</b> <span style="background:{color};'
        'color:var(--jp-ui-inverse-font-color1);border-radius:8px;padding:0 8px">'
        f"{html.escape(str(info.phase))}</span></div>"
        f"<table>{rows}</table>{note_html}</div>"
    )
