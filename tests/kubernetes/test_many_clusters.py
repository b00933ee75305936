"""200 clusters on the real control plane, as the real Jupyter server shows them.

Cheap on purpose: every cluster is a lone 100m head (no workers). A quarter run, so the
real operator makes their head pods and KWOK makes those Ready (the CPU node holds 110
pods, shared with the other tests' heads); the rest are created suspended, which the
operator reconciles to Suspended without making pods. They are created straight through
Kubernetes (as raylab writes them, under alice's identity): the server learns of them
from its watch alone. Then `GET raylab/clusters` lists exactly the 200 with the right
phases, the event stream folded from its snapshot and changes agrees with the list (each
cluster ADDED once), a new stream's snapshot equals the list, and deleting 20 through
the REST API removes exactly those from the list and the stream.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from pytest_jupyter.jupyter_core import *  # noqa: F403
from pytest_jupyter.jupyter_server import *  # noqa: F403

from raylab.backends.kuberay.manifest import raycluster_manifest
from raylab.backends.kuberay.status import OPERATOR_GRACE_S, OPERATOR_SILENT
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec

from .kuberay_support import RAY
from .server_support import (
    EventStream,
    as_hub_user,
    event_stream,
    get,
    namespace_of,
    server_as_alice,
    until,
)

COUNT = 200
RUNNING_EVERY = 4  # every 4th runs: 50 head pods
DELETED = 20
READY = ("Ready", "")
SUSPENDED = ("Suspended", "suspended: no pods running")


def name(i: int) -> str:
    return f"c{i:03d}"


def expected(i: int) -> tuple[str, str]:
    return READY if i % RUNNING_EVERY == 0 else SUSPENDED


@pytest.fixture(scope="module")
def many_namespace(control_plane: ControlPlane) -> Iterator[str]:
    admin = control_plane.api_client("admin")
    with namespace_of(control_plane, "many") as namespace:
        try:
            yield namespace
        finally:
            # Gone before the next module, so that its operator and watches are not
            # still busy with 180 deletions.
            custom = k8s_client.CustomObjectsApi(admin)
            call_json(custom.delete_collection_namespaced_custom_object, *RAY, namespace,
                      "rayclusters", propagation_policy="Background")  # fmt: skip
            core = k8s_client.CoreV1Api(admin)

            def emptied() -> bool:
                left = call_json(custom.list_namespaced_custom_object, *RAY, namespace,
                                 "rayclusters")["items"]  # fmt: skip
                pods = call_json(core.list_namespaced_pod, namespace)["items"]
                return not left and not pods

            wait_until(f"{namespace} emptied", emptied, timeout=180, interval=1)


@pytest.fixture
def jp_server_config(
    control_plane: ControlPlane,
    many_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> dict[str, Any]:
    return server_as_alice(control_plane, many_namespace, tmp_path, monkeypatch, magic_user=None)


def create_all(control_plane: ControlPlane, namespace: str) -> None:
    """The RayClusters, as raylab writes them, made by alice through Kubernetes."""
    profiles = Profiles()
    bodies = []
    for i in range(COUNT):
        request = {"name": name(i), "workers": 0, "cpus": "100m", "memory": "128Mi"}
        spec = ClusterSpec.from_mapping(request, profiles)
        body = raycluster_manifest(spec, profiles.gpu_types[spec.gpu_type], owner="alice",
                                   namespace=namespace, image="rayproject/ray:2.60.0-py311",
                                   ray_version="2.60.0")  # fmt: skip
        if expected(i) == SUSPENDED:
            body["spec"]["suspend"] = True
        bodies.append(body)
    with control_plane.api_client("alice") as api, ThreadPoolExecutor(4) as pool:
        custom = k8s_client.CustomObjectsApi(api)

        def create(body: dict[str, Any]) -> None:
            call_json(custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", body)

        list(pool.map(create, bodies))


def test_two_hundred_clusters(
    jp_fetch: Any,
    jp_asyncio_loop: Any,
    jp_http_port: int,
    jp_base_url: str,
    jp_auth_header: dict[str, str],
    control_plane: ControlPlane,
    many_namespace: str,
) -> None:
    def stream() -> EventStream:
        return event_stream(jp_http_port, jp_base_url, jp_auth_header, "alice")

    async def scenario() -> None:
        fetch = as_hub_user(jp_fetch, "alice")
        sidebar = stream()
        try:
            await two_hundred(fetch, sidebar, stream, control_plane, many_namespace)
        finally:
            sidebar.close()

    # pytest-jupyter's hook that runs async tests lives in tests/server's conftest only.
    jp_asyncio_loop.run_until_complete(scenario())


async def two_hundred(
    fetch: Any, sidebar: EventStream, stream: Any, control_plane: ControlPlane, namespace: str
) -> None:
    loop = asyncio.get_running_loop()
    _, snapshot = await sidebar.wait_for("the snapshot", lambda d: d["type"] == "SNAPSHOT", 30)
    assert snapshot.data["clusters"] == []

    began = time.monotonic()
    await loop.run_in_executor(None, create_all, control_plane, namespace)
    created = time.monotonic()
    want = {name(i): expected(i) for i in range(COUNT)}

    async def settled() -> Any:
        body = await get(fetch, "clusters")
        now = {c["name"]: (c["phase"], c["reason"]) for c in body["clusters"]}
        return body if now == want else None

    body = await until(settled, "200 clusters Ready or Suspended", fetch, timeout=300, every=1)
    done = time.monotonic()
    print(
        f"\n{COUNT} RayClusters created in {created - began:.1f} s; listed with their final "
        f"phases {done - created:.1f} s later"
    )
    silent = {m["cluster"]["name"] for m in sidebar.of("MODIFIED") if m["cluster"]["reason"]
              == OPERATOR_SILENT}  # fmt: skip
    if silent:  # a busy operator, not a stopped one: worth knowing how often
        print(f"{len(silent)} clusters waited over {OPERATOR_GRACE_S:.0f} s for the operator")
    clusters = body["clusters"]
    assert body["available"] is True
    assert [c["name"] for c in clusters] == sorted(want)  # exactly these, once each
    assert Counter(c["phase"] for c in clusters) == {"Ready": 50, "Suspended": 150}
    assert {c["owner"] for c in clusters} == {"alice"}

    listed = {c["name"]: c for c in clusters}
    await sidebar.settles_to(listed)
    assert Counter(m["cluster"]["name"] for m in sidebar.of("ADDED")) == dict.fromkeys(want, 1)
    late = stream()
    try:
        _, opened = await late.wait_for("a new snapshot", lambda d: d["type"] == "SNAPSHOT", 30)
        assert opened.data["clusters"] == clusters

        # 10 running and 10 suspended ones, through the REST API as a user would.
        doomed = _doomed(want)
        t = time.monotonic()
        replies = await asyncio.gather(
            *(fetch("raylab", "clusters", n, method="DELETE") for n in doomed)
        )
        assert [r.code for r in replies] == [204] * DELETED
        left = {n: w for n, w in want.items() if n not in doomed}

        async def removed() -> Any:
            body = await get(fetch, "clusters")
            now = {c["name"]: (c["phase"], c["reason"]) for c in body["clusters"]}
            return body if now == left else None

        body = await until(removed, f"{DELETED} clusters gone", fetch, timeout=120, every=1)
        print(f"{DELETED} deleted and gone from the list in {time.monotonic() - t:.1f} s")
        listed = {c["name"]: c for c in body["clusters"]}
        assert len(listed) == COUNT - DELETED
        for events in (sidebar, late):
            await events.settles_to(listed)
            assert sorted(m["cluster"]["name"] for m in events.of("DELETED")) == doomed
    finally:
        late.close()


def _doomed(want: dict[str, tuple[str, str]]) -> list[str]:
    running = [n for n, w in sorted(want.items()) if w == READY]
    suspended = [n for n, w in sorted(want.items()) if w == SUSPENDED]
    return sorted(running[: DELETED // 2] + suspended[: DELETED // 2])
