"""The server under load: 50 clients listing and streaming while clusters come and go.

A real `jupyter server` (its own process, so its memory is its own) runs raylab on
KubeRay as alice, with 200 suspended clusters in her namespace, as the benchmark has.
For 20 s, 50 clients keep the event stream open and list in a loop while a writer
creates and deletes clusters through the REST API (load_driver.py; bench/bench_load.py
runs the same for 60 s).

What a user would notice, asserted: no request fails and no stream breaks or says
Kubernetes is unavailable; no deleted cluster comes back; every client got every event
(all the same count); once the writer has deleted its clusters, the server's list holds
the seeded clusters only and each client's view (snapshot plus events) is exactly that
list; and the server's memory after the clients left is within RSS_GROWTH_BOUND_MIB of
what it was before they came.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from controlplane import ControlPlane
from kubernetes import client as k8s_client

from .load_driver import RSS_GROWTH_BOUND_MIB, drive
from .server_process import raylab_server, seed

CLIENTS = 50
WINDOW_S = 20.0
SEEDED = 200
MIB = 1024 * 1024


def test_fifty_clients_listing_and_streaming_while_clusters_come_and_go(
    control_plane: ControlPlane, admin_api: k8s_client.ApiClient, tmp_path: Path
) -> None:
    with raylab_server(control_plane, tmp_path, prefix="load") as (server, namespace):
        owner = server.get("api/me")["identity"]["username"]
        seeded = seed(admin_api, namespace, owner, SEEDED)
        r = asyncio.run(drive(server, seeded, CLIENTS, WINDOW_S))
        log = server.log_tail()

    assert r.errors == [], f"{len(r.errors)} errors, first: {r.errors[:5]}\n{log}"
    # It was load: every client listed many times, the writer kept writing.
    assert len(r.list_ms) >= 3 * CLIENTS
    assert r.creates >= 3
    assert r.deletes == r.creates

    assert min(r.events) == max(r.events) >= 2 * r.creates, f"events per client: {r.events}"
    assert sorted(r.final) == sorted(seeded), f"the final list: {sorted(r.final)}"
    assert r.disagreeing == {}, f"views that differ from the final list: {r.disagreeing}"

    growth = r.rss_growth / MIB
    summary = (
        f"RSS {r.rss_start / MIB:.0f} → {r.rss_end / MIB:.0f} MiB (peak {r.rss_peak / MIB:.0f})"
    )
    assert growth <= RSS_GROWTH_BOUND_MIB, summary
