"""The server under load, on the real control plane with the real operator.

A real Jupyter server (subprocess) runs raylab with the KubeRay backend as user alice,
with 200 suspended clusters in its namespace (BENCH_LOAD_CLUSTERS). For 60 s
(BENCH_WINDOW_S), 50 clients each keep the event stream open and list their clusters in
a loop (a pause of 0.5-1.5 s between lists), while a writer creates a small cluster
(a head and one worker, KWOK pods) every second through the REST API and deletes the oldest once
more than three exist (tests/kubernetes/load_driver.py does the driving; the load test
runs the same for 20 s).

Figures: list latency p95 and median under load, against one client listing alone just
before; errors (target 0); the server process's RSS before the clients came and after
they left (target: growth ≤ 64 MiB); events per client (target: all clients the same
count); and whether every client's view equals the server's final list.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

from report import Figure, emit, median, p95

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "kubernetes" / "harness"))

from tests.kubernetes.load_driver import RSS_GROWTH_BOUND_MIB, LoadResult, drive  # noqa: E402
from tests.kubernetes.server_process import raylab_server, seed  # noqa: E402

CLUSTERS = int(os.environ.get("BENCH_LOAD_CLUSTERS", "200"))
CLIENTS = 50
WINDOW_S = float(os.environ.get("BENCH_WINDOW_S", "60"))
MIB = 1024 * 1024


def run() -> list[Figure]:
    from controlplane import ControlPlane, ensure_built

    with (
        tempfile.TemporaryDirectory(prefix="raylab-bench-load-") as tmp,
        ControlPlane(binaries=ensure_built()) as plane,
        raylab_server(plane, Path(tmp)) as (server, namespace),
    ):
        owner = server.get("api/me")["identity"]["username"]
        with plane.api_client("admin") as admin:
            seeded = seed(admin, namespace, owner, CLUSTERS)
        result = asyncio.run(drive(server, seeded, CLIENTS, WINDOW_S))
    for error in result.errors[:10]:
        print("error:", error)
    for name in sorted(set(result.final) - set(result.seeded)):
        print(f"still listed at the end: {name} ({result.final[name]['phase']})")
    for client, difference in list(result.disagreeing.items())[:5]:
        print(f"client {client}'s view differs from the final list: {difference}")
    print(
        f"server RSS {result.rss_start / MIB:.1f} MiB before, {result.rss_peak / MIB:.1f} "
        f"peak, {result.rss_end / MIB:.1f} after ({result.rss_growth / MIB:+.1f}); events "
        f"per client {min(result.events, default=0)}-{max(result.events, default=0)}"
    )
    return figures(result)


def figures(r: LoadResult) -> list[Figure]:
    where = f"{r.clients} clients × {r.window_s:.0f} s, {len(r.seeded)} clusters"
    growth = r.rss_growth / MIB
    agreeing = r.clients - len(r.disagreeing)
    return [
        Figure(
            name=f"GET raylab/clusters under load, {where} (p95)", value=p95(r.list_ms),
            unit="ms", target="reported", anchor=p95(r.unloaded_ms),
            anchor_name="one client alone", samples=r.list_ms, anchor_samples=r.unloaded_ms,
        ),
        Figure(
            name=f"GET raylab/clusters under load, {where} (median)", value=median(r.list_ms),
            unit="ms", target="reported", anchor=median(r.unloaded_ms),
            anchor_name="one client alone",
        ),
        Figure(
            name=f"requests answered under load ({r.creates} creates, {r.deletes} deletes)",
            value=float(r.requests), unit="requests", target="reported",
        ),
        Figure(
            name="errors under load", value=float(len(r.errors)), unit="errors",
            target="0", met=not r.errors,
        ),
        Figure(
            name="server RSS after the load", value=r.rss_end / MIB, unit="MiB",
            target=f"growth ≤ {RSS_GROWTH_BOUND_MIB} MiB", anchor=r.rss_start / MIB,
            anchor_name="before the load", met=growth <= RSS_GROWTH_BOUND_MIB,
        ),
        Figure(
            name="events received by each client (the fewest)",
            value=float(min(r.events, default=0)), unit="events",
            target="every client the same count", samples=[float(e) for e in r.events],
            met=bool(r.events) and min(r.events) == max(r.events) > 0,
        ),
        Figure(
            name="clusters deleted but still listed at the end",
            value=float(len(set(r.final) - set(r.seeded))), unit="clusters", target="0",
            met=sorted(r.final) == r.seeded,
        ),
        Figure(
            name="clients whose last view equals the final list", value=float(agreeing),
            unit="clients", target=f"all {r.clients}", met=agreeing == r.clients,
        ),
    ]  # fmt: skip


if __name__ == "__main__":
    emit("Server under load", run(), "load")
