"""The REST API and live events over the local backend with real Ray processes.

One head-only Ray cluster per module keeps this affordable; each test gets a fresh
Jupyter server (as pytest-jupyter does), which finds the cluster again from the state
folder — the same path a restarted server takes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from tornado.httpclient import AsyncHTTPClient, HTTPClientError, HTTPRequest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.model import ClusterEnvironment, Phase
from raylab.service import ClusterService
from raylab.spec import FIELDS
from raylab.sync.values import EnvValues
from tests.server.conftest import as_user

OWNER = "alice"
NAME = "api1"


def service(user: str) -> ClusterService:
    settings = Settings.from_config()
    return ClusterService(LocalBackend(settings.local_state_dir()), settings, user)


@pytest.fixture(scope="module")
def alices_cluster() -> Iterator[str]:
    """Created the way the magics do it (directly through the service)."""
    svc = service(OWNER)
    try:
        svc.create({"name": NAME, "workers": 0, "cpus": "1"})
        svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
        yield NAME
    finally:
        if svc.backend.get(NAME) is not None:
            svc.delete(NAME)


async def fetch_json(jp_fetch: Any, *path: str, user: str = OWNER, **kw: Any) -> Any:
    resp = await jp_fetch("raylab", *path, headers=as_user(user), **kw)
    return json.loads(resp.body) if resp.body else None


async def refused(jp_fetch: Any, *path: str, user: str = OWNER, **kw: Any) -> tuple[int, Any]:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", *path, headers=as_user(user), **kw)
    body = err.value.response.body if err.value.response else b"{}"
    return err.value.code, json.loads(body)


async def test_owner_sees_it_others_do_not(jp_fetch: Any, alices_cluster: str) -> None:
    mine = await fetch_json(jp_fetch, "clusters")
    assert [c["name"] for c in mine["clusters"]] == [NAME]
    cluster = mine["clusters"][0]
    assert (cluster["phase"], cluster["owner"], cluster["gpu_type"]) == ("Ready", OWNER, "cpu")
    assert mine["available"] is True

    theirs = await fetch_json(jp_fetch, "clusters", user="bob")
    assert theirs["clusters"] == []
    for method, path in (("GET", ()), ("DELETE", ()), ("GET", ("logs",))):
        code, body = await refused(jp_fetch, "clusters", NAME, *path, user="bob", method=method)
        assert code == 404
        assert body["error"] == f"no cluster named '{NAME}'"
    code, _ = await refused(
        jp_fetch, "clusters", NAME, user="bob", method="PATCH", body=json.dumps({"workers": 1})
    )
    assert code == 404
    # bob asking for ?all=1 is not an admin: still only his own.
    assert (await fetch_json(jp_fetch, "clusters", user="bob", params={"all": "1"}))[
        "clusters"
    ] == []


async def test_post_for_your_existing_cluster_is_200_with_it(
    jp_fetch: Any, alices_cluster: str
) -> None:
    resp = await jp_fetch("raylab", "clusters", method="POST", headers=as_user(OWNER),
                          body=json.dumps({"name": NAME}))  # fmt: skip
    assert resp.code == 200  # not 201: nothing was made
    cluster = json.loads(resp.body)["cluster"]
    assert (cluster["name"], cluster["phase"], cluster["owner"]) == (NAME, "Ready", OWNER)
    listed = await fetch_json(jp_fetch, "clusters")
    assert [c["name"] for c in listed["clusters"]] == [NAME]  # still one


async def test_patch_workers_scales_the_real_cluster(jp_fetch: Any, alices_cluster: str) -> None:
    scaled = await fetch_json(jp_fetch, "clusters", NAME, method="PATCH",
                              body=json.dumps({"workers": 1}))  # fmt: skip
    assert scaled["cluster"]["workers_desired"] == 1
    svc = service(OWNER)
    try:
        info = await asyncio.to_thread(
            svc.wait, NAME, lambda i: i.workers_ready == 1 and i.phase == Phase.READY, 300
        )
        assert info.workers_desired == 1
        # The REST answer follows the server's watch of the cluster, a moment later.
        for _ in range(120):
            got = (await fetch_json(jp_fetch, "clusters", NAME))["cluster"]
            if (got["workers_ready"], got["phase"]) == (1, "Ready"):
                break
            await asyncio.sleep(0.5)
        assert (got["workers_ready"], got["workers_desired"], got["phase"]) == (1, 1, "Ready")
    finally:
        back = await fetch_json(jp_fetch, "clusters", NAME, method="PATCH",
                                body=json.dumps({"workers": 0}))  # fmt: skip
        assert back["cluster"]["workers_desired"] == 0
        await asyncio.to_thread(
            svc.wait, NAME, lambda i: i.workers_ready == 0 and i.phase == Phase.READY, 120
        )


async def test_the_environment_shows_names_never_values(jp_fetch: Any, alices_cluster: str) -> None:
    """As `up --env TOKEN=...` leaves it: the names with the cluster, the value in the
    owner's 0600 file, which no REST answer reads."""
    svc = service(OWNER)
    env = ClusterEnvironment(working_dir="/nb", working_dir_bytes=3 << 20, env_names=("TOKEN",))
    info = svc.set_environment(NAME, env)
    values = EnvValues.default()
    values.save(info, {"TOKEN": "s3cret-rest"})
    try:
        one = await jp_fetch("raylab", "clusters", NAME, headers=as_user(OWNER))
        every = await jp_fetch("raylab", "clusters", headers=as_user(OWNER))
        assert json.loads(one.body)["cluster"]["environment"]["env_names"] == ["TOKEN"]
        assert b"s3cret-rest" not in one.body + every.body
    finally:
        values.delete(info)
        svc.set_environment(NAME, ClusterEnvironment())


async def test_admin_overview(jp_fetch: Any, alices_cluster: str) -> None:
    everyone = await fetch_json(jp_fetch, "clusters", user="admin", params={"all": "1"})
    row = next(c for c in everyone["clusters"] if c["name"] == NAME)
    assert row["owner"] == OWNER
    assert row["dashboard_path"] == f"raylab/clusters/{NAME}/dashboard/"
    profiles = await fetch_json(jp_fetch, "profiles", user="admin")
    assert profiles["user"] == {"name": "admin", "admin": True}


@pytest.mark.parametrize("raylab_config", [{"admin_groups": ["platform"]}])
async def test_admin_groups_see_everyone(
    jp_fetch: Any, alices_cluster: str, raylab_config: dict[str, Any]
) -> None:
    carol = as_user("carol", ("platform", "ml"))
    everyone = json.loads((await jp_fetch("raylab", "clusters", params={"all": "1"},
                                          headers=carol)).body)  # fmt: skip
    assert [c["name"] for c in everyone["clusters"]] == [NAME]
    profiles = json.loads((await jp_fetch("raylab", "profiles", headers=carol)).body)
    assert profiles["user"] == {"name": "carol", "admin": True}
    dave = as_user("dave", ("ml",))
    none = json.loads((await jp_fetch("raylab", "clusters", params={"all": "1"},
                                      headers=dave)).body)  # fmt: skip
    assert none["clusters"] == []


async def test_logs(jp_fetch: Any, alices_cluster: str) -> None:
    body = await fetch_json(jp_fetch, "clusters", NAME, "logs", params={"tail": "500"})
    assert "Ray runtime started" in body["logs"]
    code, err = await refused(jp_fetch, "clusters", NAME, "logs", params={"tail": "lots"})
    assert (code, err["field"], err["code"]) == (422, "tail", "invalid")


async def test_the_token_never_leaves_the_server(jp_fetch: Any, alices_cluster: str) -> None:
    token = service(OWNER).auth_token(NAME)
    assert token
    answers = [
        await jp_fetch("raylab", "clusters", headers=as_user(OWNER)),
        await jp_fetch("raylab", "clusters", NAME, headers=as_user(OWNER)),
        await jp_fetch("raylab", "clusters", NAME, "logs", headers=as_user(OWNER)),
        await jp_fetch("raylab", "profiles", headers=as_user(OWNER)),
        await jp_fetch("raylab", "clusters", NAME, "dashboard", "", headers=as_user(OWNER)),
    ]
    for answer in answers:
        assert token not in answer.body.decode()
        assert token not in str(answer.headers)


async def test_dashboard_is_proxied(jp_fetch: Any, alices_cluster: str) -> None:
    page = await jp_fetch("raylab", "clusters", NAME, "dashboard", "", headers=as_user(OWNER))
    assert page.code == 200
    assert b"Ray" in page.body
    version = await fetch_json(jp_fetch, "clusters", NAME, "dashboard", "api", "version")
    assert version["ray_version"].startswith("2.60")
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", "clusters", NAME, "dashboard", "", headers=as_user("bob"))
    assert err.value.code == 404
    # The same dashboard fetched directly, without the token that the proxy adds: refused.
    direct = service(OWNER).get(NAME).endpoints.dashboard
    with pytest.raises(HTTPClientError) as err:
        await AsyncHTTPClient().fetch(f"{direct}/api/version")
    assert err.value.code == 401
    # A token the browser sends is not passed on (only the server's own is).
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", "clusters", NAME, "dashboard", "api", "authenticate",
                       method="POST", body="", headers={**as_user(OWNER),
                       "X-Ray-Authorization": "Bearer guess"})  # fmt: skip
    assert err.value.code == 401  # Ray's login saw no token: it never sets its cookie


async def test_dashboard_websocket_is_proxied(
    jp_fetch: Any, jp_ws_fetch: Any, alices_cluster: str
) -> None:
    """A job's live log: the dashboard's websocket, through the proxy, with the token."""
    body = json.dumps({"entrypoint": "echo hello-from-a-job"})
    job = await fetch_json(
        jp_fetch, "clusters", NAME, "dashboard", "api", "jobs/", method="POST", body=body
    )
    tail = ("raylab", "clusters", NAME, "dashboard", "api", "jobs", job["submission_id"])
    ws = await jp_ws_fetch(*tail, "logs", "tail", headers=as_user(OWNER))
    text = ""
    try:
        while "hello-from-a-job" not in text:
            message = await asyncio.wait_for(ws.read_message(), timeout=300)
            if message is None:  # the dashboard closes it once the job's log is complete
                break
            text += message
    finally:
        ws.close()
    assert "hello-from-a-job" in text
    with pytest.raises(HTTPClientError) as err:
        await jp_ws_fetch(*tail, "logs", "tail", headers=as_user("bob"))
    assert err.value.code == 404
    # An admin may look (the job's status), not act with the owner's token.
    seen = await fetch_json(jp_fetch, *tail[1:], user="admin")
    assert seen["entrypoint"] == "echo hello-from-a-job"
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*tail, "stop", method="POST", body="", headers=as_user("admin"))
    assert err.value.code == 403


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"gpus": 3, "workers": 2}, "gpus", "gpus: 3 GPUs cannot be split evenly across 2"),
        ({"name": "Bad_Name"}, "name", "is not a valid name"),
        ({"memory": "64GB"}, "memory", "is not a quantity"),
        ({"gpus": "lots"}, "gpus", "is not a whole number"),
        ({"image": "x; rm -rf /"}, "image", "is not an image reference"),
        ({"gpu": 4}, "gpu", "unknown field"),
        (["gpus"], "body", "expected a JSON object"),
    ],
)
async def test_bad_requests_name_the_field(
    jp_fetch: Any, state_dir: Any, body: Any, field: str, message: str
) -> None:
    before = sorted(p.name for p in state_dir.iterdir()) if state_dir.exists() else []
    code, err = await refused(jp_fetch, "clusters", method="POST", body=json.dumps(body))
    assert code == 422
    assert (err["field"], err["code"]) == (field, "invalid")
    assert message in err["error"]
    after = sorted(p.name for p in state_dir.iterdir()) if state_dir.exists() else []
    assert after == before, "a refused request created something"


async def test_not_json(jp_fetch: Any) -> None:
    code, err = await refused(jp_fetch, "clusters", method="POST", body="{not json")
    assert (code, err["field"]) == (422, "body")


@pytest.mark.parametrize("raylab_config", [{"max_gpus_per_user": 2}])
async def test_quota_is_checked_before_anything_is_made(
    jp_fetch: Any, raylab_config: dict[str, Any]
) -> None:
    code, err = await refused(
        jp_fetch, "clusters", method="POST", body=json.dumps({"gpus": 4, "workers": 1})
    )
    assert code == 403
    assert err["error"] == "4 GPUs requested, quota is 2 and 0 are in use"
    assert (err["field"], err["code"]) == ("gpus", "quota")  # where the form shows it
    profiles = await fetch_json(jp_fetch, "profiles")
    assert profiles["quota"]["gpus_left"] == 2


async def test_profiles_list_the_export_feature_and_its_route_answers(jp_fetch: Any) -> None:
    profiles = await fetch_json(jp_fetch, "profiles")
    features = ["export", "usage", "keep-running", "jobs", "capacity", "gpu-use", "serve-apps"]
    assert profiles["features"] == features
    assert profiles["autoscales"] is False  # local: the dialog offers no autoscaling
    # Nothing queues locally: the dialog shows no capacity line and no priority.
    assert (profiles["queues"], profiles["priority_classes"]) == ({}, [])
    assert await fetch_json(jp_fetch, "capacity") == {"capacity": None}
    code, err = await refused(jp_fetch, "capacity", params={"gpus": "nan"})
    assert (code, err["field"]) == (422, "gpus")
    assert profiles["namespace"] is None  # local: no namespaces, a name alone is the path
    # The request's fields as declared once, for the New-cluster dialog's inputs.
    assert [f["name"] for f in profiles["fields"]] == list(FIELDS)
    assert profiles["fields"][0]["label"] == "Name"
    # What the frontend's "Export to pipeline" button relies on: the route is served (a
    # 422 naming the missing field, not the catch-all's 404).
    code, err = await refused(jp_fetch, "export", method="POST", body="{}")
    assert (code, err["field"]) == (422, "path")


async def test_unauthenticated_requests_are_refused(jp_fetch: Any) -> None:
    for path in (("clusters",), ("profiles",), ("events",), ("clusters", NAME)):
        with pytest.raises(HTTPClientError) as err:
            await jp_fetch("raylab", *path, headers={"Authorization": ""})
        assert err.value.code == 403


async def sse(url: str, headers: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
    """Yield each SSE message of a real streaming request."""
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    buffer = ""

    def on_chunk(chunk: bytes) -> None:
        nonlocal buffer
        buffer += chunk.decode()
        while "\n\n" in buffer:
            block, buffer = buffer.split("\n\n", 1)
            for line in block.splitlines():
                if line.startswith("data: "):
                    queue.put_nowait(json.loads(line[6:]))

    request = HTTPRequest(url, headers=headers, streaming_callback=on_chunk, request_timeout=600)
    task = asyncio.ensure_future(AsyncHTTPClient().fetch(request, raise_error=False))
    try:
        while True:
            yield await asyncio.wait_for(queue.get(), 240)
    finally:
        task.cancel()


async def next_of(stream: AsyncIterator[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    async for msg in stream:
        if msg["type"] == kind and msg.get("cluster", {}).get("name") == name:
            return msg
    raise AssertionError("stream ended")


async def test_events_follow_clusters_made_elsewhere(
    jp_fetch: Any, jp_base_url: str, jp_http_port: int, jp_auth_header: dict[str, str]
) -> None:
    url = f"http://localhost:{jp_http_port}{jp_base_url}raylab/events"
    alice = sse(url, {**jp_auth_header, **as_user(OWNER)})
    bob = sse(url, {**jp_auth_header, **as_user("bob")})
    first = await alice.__anext__()
    assert first["type"] == "SNAPSHOT"
    assert first["available"] is True
    assert (await bob.__anext__())["type"] == "SNAPSHOT"

    svc = service(OWNER)  # as `%raycluster up` in a kernel does, not through the server
    await asyncio.get_running_loop().run_in_executor(
        None, lambda: svc.create({"name": "api2", "workers": 0, "cpus": "1"})
    )
    added = await next_of(alice, "ADDED", "api2")
    assert added["cluster"]["owner"] == OWNER
    ready = added
    while ready["cluster"]["phase"] != "Ready":
        ready = await next_of(alice, "MODIFIED", "api2")
    # bob makes one too, and deletes it after alice has deleted hers: one watch feeds
    # both streams in order, so had alice's events leaked to bob they would come first.
    bobs = service("bob")
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, lambda: bobs.create({"name": "api3", "workers": 0}))
    await loop.run_in_executor(None, svc.delete, "api2")
    deleted = await next_of(alice, "DELETED", "api2")
    assert deleted["cluster"]["name"] == "api2"
    await loop.run_in_executor(None, bobs.delete, "api3")
    seen = []
    async for msg in bob:
        seen.append(msg.get("cluster", {}).get("name"))
        if msg["type"] == "DELETED" and seen[-1] == "api3":
            break
    assert "api3" in seen
    assert set(seen) <= {"api3", None}, f"bob's stream carried {seen}"
    listed = await fetch_json(jp_fetch, "clusters", user="bob")
    assert listed["clusters"] == []
    await alice.aclose()
    await bob.aclose()
