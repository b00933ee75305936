"""The KubeRay operator stopped while raylab serves: nothing breaks, and a new cluster says
why it does not start.

A real Jupyter server runs raylab as alice (the documented Role); `%raycluster up` runs
in a worker thread as a terminal IPython would, against the same namespace. With the
operator down, the cluster made before stays listed with its last status; the new one is
Pending, and once the operator has left it alone for OPERATOR_GRACE_S the list, the
event stream (with no Kubernetes event to trigger it) and the magic's progress say that
the operator is not picking it up. When the operator returns, the cluster becomes Ready
and the magic finishes, with no raylab restart.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403

from raylab.backends.kuberay.status import OPERATOR_GRACE_S, OPERATOR_SILENT

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

WAITING = "waiting for the KubeRay operator to create the head"
SMALL = {"workers": 0, "cpus": "100m", "memory": "256Mi"}  # a head alone, on the CPU node


@pytest.fixture(scope="module")
def alice_namespace(control_plane: ControlPlane) -> Iterator[str]:
    with namespace_of(control_plane, "op") as namespace:
        yield namespace


@pytest.fixture
def jp_server_config(
    control_plane: ControlPlane,
    alice_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    return server_as_alice(control_plane, alice_namespace, tmp_path, monkeypatch)


def test_operator_stopped_then_back(
    jp_fetch: Any,
    jp_asyncio_loop: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    control_plane: ControlPlane,
) -> None:
    async def scenario() -> None:
        stream = event_stream(jp_http_port, jp_base_url, jp_auth_header, "alice")
        try:
            await operator_stopped_then_back(as_hub_user(jp_fetch, "alice"), stream, control_plane)
        finally:
            stream.close()

    # pytest-jupyter's hook that runs async tests lives in tests/server's conftest only.
    jp_asyncio_loop.run_until_complete(scenario())


async def operator_stopped_then_back(
    fetch: Any, stream: EventStream, control_plane: ControlPlane
) -> None:
    loop = asyncio.get_running_loop()
    made = await fetch(
        "raylab", "clusters", method="POST", body=json.dumps({"name": "keep", **SMALL})
    )
    assert made.code == 201

    async def keep_ready() -> Any:
        return phases((await get(fetch, "clusters"))["clusters"]).get("keep") == "Ready"

    await until(keep_ready, "keep Ready", fetch, timeout=120)

    await loop.run_in_executor(None, control_plane.stop_operator)
    operator_down = True
    try:
        magic = loop.run_in_executor(
            None, terminal_magic(), "up --name late --workers 0 --cpus 100m --memory 256Mi "
            "--no-connect --timeout 300",
        )  # fmt: skip

        i, added = await stream.wait_for("late ADDED", change("ADDED", "late"), timeout=60)
        assert (added.data["cluster"]["phase"], added.data["cluster"]["reason"]) == (
            "Pending",
            WAITING,
        )
        created = added.data["cluster"]["created"]
        # Nothing happens in Kubernetes at this moment: the watch re-derives on the clock.
        _, hint = await stream.wait_for(
            "the operator hint",
            change("MODIFIED", "late", reason=OPERATOR_SILENT),
            OPERATOR_GRACE_S + 30,
            i,
        )
        assert hint.data["cluster"]["phase"] == "Pending"
        # Never before the grace period (`created` is whole seconds, rounded down, so
        # this holds exactly); how soon after it is a figure, not a test of a busy machine.
        assert hint.wall - created >= OPERATOR_GRACE_S, hint.wall - created
        print(f"\noperator hint {hint.wall - created - OPERATOR_GRACE_S:+.1f} s after the grace",
              file=sys.stderr)  # fmt: skip
        # One event for it, not one per tick of the clock.
        assert stream.of("MODIFIED", "late") == [hint.data]

        body = await get(fetch, "clusters")
        assert body["available"] is True  # Kubernetes answers; only the operator is away
        listed = {c["name"]: c for c in body["clusters"]}
        assert set(listed) == {"keep", "late"}
        assert listed["keep"]["phase"] == "Ready"  # its last status, pods still running
        assert (listed["late"]["phase"], listed["late"]["reason"]) == ("Pending", OPERATOR_SILENT)

        control_plane.start_operator()  # from this thread, which outlives it (see there)
        operator_down = False
        printed = await asyncio.wait_for(magic, 120)
    finally:
        if operator_down:
            control_plane.start_operator()

    lines = printed.splitlines()
    assert lines[0] == f"late  ·  Pending — {WAITING}  ·  0/0 workers ready  ·  GPUs none", printed
    assert f"late  ·  Pending — {OPERATOR_SILENT}  ·  0/0 workers ready  ·  GPUs none" in lines
    assert "late  ·  Ready  ·  0/0 workers ready  ·  GPUs none" in lines, printed

    await stream.wait_for("late Ready", change("MODIFIED", "late", phase="Ready"), 30)
    body = await get(fetch, "clusters")
    assert phases(body["clusters"]) == {"keep": "Ready", "late": "Ready"}
    assert phases(stream.clusters()) == {"keep": "Ready", "late": "Ready"}
    for name in ("keep", "late"):
        deleted = await fetch("raylab", "clusters", name, method="DELETE")
        assert deleted.code == 204
