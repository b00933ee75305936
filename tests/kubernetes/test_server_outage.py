"""The server extension over KubeRay when Kubernetes goes away for 30 s and comes back.

A real Jupyter server (pytest-jupyter) runs raylab as alice (the documented Role) against
the real control plane; a sidebar's event stream stays open throughout, and
`%raycluster up` (in a worker thread, as a terminal IPython runs it) waits on a cluster
that cannot be Ready before the outage. With the API server stopped: the stream says
Kubernetes is unreachable within seconds; reads still answer from the cache, with every
cluster and its last status and `available: false` naming the cause; writes get 503
saying Kubernetes cannot be reached. When the API server returns, everything recovers
without restarting anything of raylab: the stream says so, the waiting magic finishes
with a Ready cluster, and the list and the stream hold each cluster exactly once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403
from tornado.httpclient import HTTPClientError

from .server_support import (
    EventStream,
    as_hub_user,
    change,
    event_stream,
    get,
    namespace_of,
    phases,
    server_as_alice,
    terminal_magic,
    until,
)

OUTAGE_S = 30.0  # as long as the scenario; well under NODE_MONITOR_GRACE
# The stream must say so while the API server is down (it stays down until then): the
# order is the test; how soon is printed (the watches break at once, the first
# reconnect is refused), not asserted on a loaded machine.
NOTICE_S = 60.0


@pytest.fixture(scope="module")
def alice_namespace(control_plane: ControlPlane) -> Iterator[str]:
    with namespace_of(control_plane, "srv") as namespace:
        yield namespace


@pytest.fixture
def jp_server_config(
    control_plane: ControlPlane,
    alice_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    return server_as_alice(control_plane, alice_namespace, tmp_path, monkeypatch)


def test_outage_then_recovery(
    jp_fetch: Any,
    jp_asyncio_loop: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    control_plane: ControlPlane,
) -> None:
    async def scenario() -> None:
        fetch = as_hub_user(jp_fetch, "alice")
        made = await fetch(
            "raylab", "clusters", method="POST", body=json.dumps({"name": "out1", "workers": 1})
        )
        assert made.code == 201

        async def ready() -> Any:
            return phases((await get(fetch, "clusters"))["clusters"]).get("out1") == "Ready"

        await until(ready, "out1 Ready", fetch, timeout=120)
        stream = event_stream(jp_http_port, jp_base_url, jp_auth_header, "alice")
        try:
            await outage_then_recovery(fetch, stream, control_plane)
        finally:
            stream.close()

    # pytest-jupyter's hook that runs async tests lives in tests/server's conftest only.
    jp_asyncio_loop.run_until_complete(scenario())


def status(available: bool, error: str = "") -> Any:
    """Matches a STATUS message (whose error says `error`)."""
    return lambda d: (
        d["type"] == "STATUS" and d["available"] is available and error in (d["error"] or "")
    )


async def outage_then_recovery(
    fetch: Any, stream: EventStream, control_plane: ControlPlane
) -> None:
    loop = asyncio.get_running_loop()
    _, snapshot = await stream.wait_for("the snapshot", lambda d: d["type"] == "SNAPSHOT", 30)
    assert phases(snapshot.data["clusters"]) == {"out1": "Ready"}
    assert snapshot.data["available"] is True

    # The operator is held back so that out2 cannot be Ready before the outage begins.
    await loop.run_in_executor(None, control_plane.stop_operator)
    operator_down = True
    try:
        magic = loop.run_in_executor(
            None, terminal_magic(), "up --name out2 --workers 0 --cpus 100m --memory 256Mi "
            "--no-connect --timeout 300",
        )  # fmt: skip
        await stream.wait_for("out2 ADDED", change("ADDED", "out2", phase="Pending"), 60)

        began = time.monotonic()
        await loop.run_in_executor(None, control_plane.stop_apiserver)
        down = time.monotonic()
        try:
            i, lost = await stream.wait_for("unreachable", status(False), NOTICE_S)
            print(
                f"\nunreachable on the stream {lost.at - began:.1f} s after the stop began, "
                f"{lost.at - down:+.1f} s from the API server's exit",
                file=sys.stderr,  # stdout belongs to the magic meanwhile
            )
            # First, maybe, what the stopping API server still answered ("apiserver is
            # shutting down"); then, and until it is back, that it cannot be reached.
            assert lost.data["error"]
            unreachable = status(False, "cannot reach Kubernetes")
            i, away = await stream.wait_for("cannot reach", unreachable, NOTICE_S, i)
            print(f"'cannot reach' {away.at - down:+.1f} s from the API server's exit",
                  file=sys.stderr)  # fmt: skip

            body = await get(fetch, "clusters")
            assert body["available"] is False
            assert "cannot reach Kubernetes" in body["error"]
            # Nothing lost: every cluster is still listed, with its last known status.
            assert phases(body["clusters"]) == {"out1": "Ready", "out2": "Pending"}

            with pytest.raises(HTTPClientError) as err:
                await fetch("raylab", "clusters", method="POST", body=json.dumps({"name": "o3"}))
            assert err.value.code == 503
            detail = json.loads(err.value.response.body if err.value.response else b"{}")
            assert "cannot reach Kubernetes" in detail["error"]
            assert not magic.done()  # still waiting, not failed

            await asyncio.sleep(max(0.0, began + OUTAGE_S - time.monotonic()))
        finally:
            control_plane.start_apiserver()  # from this thread, which outlives it (see there)
        back_at = time.monotonic()
        _, back = await stream.wait_for("recovered", status(True), 60, i)
        print(f"available again {back.at - back_at:+.1f} s after the restart", file=sys.stderr)
        assert back.data["error"] is None

        control_plane.start_operator()
        operator_down = False
        printed = await asyncio.wait_for(magic, 180)
    finally:
        if operator_down:
            control_plane.start_operator()

    assert "out2  ·  Ready  ·  0/0 workers ready  ·  GPUs none" in printed.splitlines(), printed
    await stream.wait_for("out2 Ready", change("MODIFIED", "out2", phase="Ready"), 30)

    body = await get(fetch, "clusters")
    assert body["available"] is True
    assert body["error"] is None
    # No duplicate, no loss: each cluster once, in the list and in the stream alike.
    names = [c["name"] for c in body["clusters"]]
    assert names == ["out1", "out2"]
    assert phases(body["clusters"]) == {"out1": "Ready", "out2": "Ready"}
    await stream.settles_to({c["name"]: c for c in body["clusters"]})
    assert stream.of("DELETED") == []
    assert [m["cluster"]["name"] for m in stream.of("ADDED")] == ["out2"]

    for name in names:
        deleted = await fetch("raylab", "clusters", name, method="DELETE")
        assert deleted.code == 204
