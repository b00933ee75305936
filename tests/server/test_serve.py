"""Ray Serve from a cell, on two real local clusters at once, behind a real Jupyter server.

A kernel connected by raylab deploys with a plain `serve.run(app)`: each cluster's Serve
listens on its own port (never 8000 for both), so each cluster's requests reach its own
app. The owner reaches an app through Jupyter (`raylab/clusters/NAME/serve/ROUTE`) with
the dashboard proxy's rules: another user gets a 404, an admin may only look, a hung app
gets a 504 that names it. `%raycluster serve` and `GET clusters/NAME/apps` list apps; an
app that answers requests is work for the culler, one that answers none is not; `down`
takes the app and its URL away.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import io
import json
import os
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from tornado.httpclient import HTTPClientError

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.sweep import Culler
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService
from tests.clock import Clock
from tests.ledgers import ledgers_put_back
from tests.server.conftest import as_user

OWNER = os.environ.get("JUPYTERHUB_USER") or getpass.getuser()
A, B = "servea", "serveb"
TIMEOUT_S = 3.0


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {"culler": "off", "serve_timeout_s": TIMEOUT_S}


def service() -> ClusterService:
    settings = Settings.from_config()
    return ClusterService(LocalBackend(settings.local_state_dir()), settings, OWNER)


def current(name: str) -> ClusterInfo:
    return service().get(name)


@pytest.fixture(scope="module")
def clusters() -> Iterator[tuple[str, str]]:
    svc = service()
    try:
        for name in (A, B):
            svc.create({"name": name, "workers": 0, "cpus": "1", "memory": "2Gi"})
        for name in (A, B):
            svc.wait(name, lambda i: i.phase == Phase.READY, timeout=600)
        yield A, B
    finally:
        for name in (A, B):
            if svc.backend.get(name) is not None:
                svc.delete(name)


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raylab")
    return ip


def magic(shell: InteractiveShell, line: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell.run_line_magic("raycluster", line)
    return out.getvalue()


def hello_app(who: str) -> Any:
    """Defined in a function: Ray ships the class by value, the cluster needs no tests."""
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    class Hello:
        async def __call__(self, request: Any) -> dict[str, str]:
            if request.url.path.endswith("/slow"):
                await asyncio.sleep(3600)  # a hung app
            if request.url.path.endswith("/stream"):
                from starlette.responses import StreamingResponse

                async def events() -> Any:
                    for i in range(3):
                        yield f"data: {i}\n\n"
                        await asyncio.sleep(1.0)

                return StreamingResponse(events(), media_type="text/event-stream")
            body = (await request.body()).decode()
            return {"cluster": who, "path": request.url.path, "method": request.method,
                    "body": body}  # fmt: skip

    return Hello.bind()


@pytest.fixture(scope="module")
def deployed(clusters: tuple[str, str], shell: InteractiveShell) -> Iterator[None]:
    """Each cluster's app, deployed from the kernel as a user would: connect, serve.run."""
    from ray import serve

    for name in clusters:
        magic(shell, f"connect {name}")
        serve.run(hello_app(name), name="hello", route_prefix="/hello")
    yield
    magic(shell, "disconnect")


def get(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        return json.loads(response.read())


async def fetch(jp_fetch: Any, *path: str, user: str = OWNER, **kw: Any) -> tuple[int, Any]:
    try:
        resp = await jp_fetch("raylab", *path, headers=as_user(user), **kw)
    except HTTPClientError as err:
        resp = err.response
        assert resp is not None
    text = resp.body.decode() if resp.body else ""
    try:
        return resp.code, json.loads(text)
    except ValueError:
        return resp.code, text


def until(what: str, timeout: float, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {timeout:g} s")


async def test_a_cluster_without_serve_says_how_to_deploy(
    jp_fetch: Any, clusters: tuple[str, str]
) -> None:
    code, body = await fetch(jp_fetch, "clusters", A, "apps")
    assert code == 200
    assert body["serve"]["state"] == "none", body
    assert body["message"] == f"no Serve app is deployed on {A!r}"
    assert "serve.run(app" in body["detail"]
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello")
    assert code == 404
    assert body == {"error": f"no Serve app is deployed on cluster {A!r}",
                    "detail": body["detail"]}  # fmt: skip
    assert "serve.run(app, route_prefix='/hello')" in body["detail"]


def test_two_clusters_serve_at_once_each_on_its_own_port(deployed: None) -> None:
    a, b = current(A).endpoints.serve, current(B).endpoints.serve
    assert a
    assert b
    assert a != b
    assert not a.endswith(":8000")
    assert not b.endswith(":8000")
    for _ in range(20):
        assert get(f"{a}/hello")["cluster"] == A
        assert get(f"{b}/hello")["cluster"] == B


def test_the_serve_verb_lists_apps_with_both_urls(deployed: None, shell: InteractiveShell) -> None:
    lines = magic(shell, f"serve {A}").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("NAME"))  # after Ray's logs
    header, row = lines[at : at + 2]
    assert header.split() == ["NAME", "ROUTE", "STATUS", "REPLICAS", "URL", "IN-CLUSTER", "URL"]
    assert row.split()[:4] == ["hello", "/hello", "RUNNING", "1/1"]
    assert f"raylab/clusters/{A}/serve/hello" in row
    assert f"{current(A).endpoints.serve}/hello" in row


async def test_the_owner_reaches_the_app_through_jupyter(jp_fetch: Any, deployed: None) -> None:
    code, body = await fetch(jp_fetch, "clusters", A, "apps")
    assert code == 200
    (app,) = body["serve"]["apps"]
    assert (app["name"], app["route"], app["status"]) == ("hello", "/hello", "RUNNING")
    assert app["path"] == f"raylab/clusters/{A}/serve/hello"
    assert app["in_cluster_url"] == f"{current(A).endpoints.serve}/hello"
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello", "x?y=1")
    assert (code, body["cluster"], body["path"]) == (200, A, "/hello/x")
    # A script with the user's Jupyter token (jp_fetch sends it as a header) may write.
    code, body = await fetch(jp_fetch, "clusters", B, "serve", "hello", method="POST",
                             body=json.dumps({"q": 1}))  # fmt: skip
    assert (code, body["cluster"], body["method"], body["body"]) == (200, B, "POST", '{"q": 1}')


async def test_a_stream_passes_through_as_it_is_made(jp_fetch: Any, deployed: None) -> None:
    arrived: list[tuple[float, bytes]] = []

    def on_chunk(chunk: bytes) -> None:
        arrived.append((time.monotonic(), chunk))

    resp = await jp_fetch("raylab", "clusters", A, "serve", "hello", "stream",
                          headers=as_user(OWNER), request_timeout=60,
                          streaming_callback=on_chunk)  # fmt: skip
    assert resp.code == 200
    assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert b"".join(c for _, c in arrived) == b"data: 0\n\ndata: 1\n\ndata: 2\n\n"
    assert arrived[-1][0] - arrived[0][0] > 1.5  # the first event came before the last was made


async def test_others_are_refused_and_an_admin_only_looks(jp_fetch: Any, deployed: None) -> None:
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello", user="mallory")
    assert code == 404
    assert body == {"error": f"no cluster named {A!r}"}
    code, _ = await fetch(jp_fetch, "clusters", A, "apps", user="mallory")
    assert code == 404
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello", user="admin")
    assert (code, body["cluster"]) == (200, A)
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello", user="admin",
                             method="POST", body="{}")  # fmt: skip
    assert code == 403
    assert "only" in body["error"]


async def test_routes_stay_inside_the_clusters_serve(jp_fetch: Any, deployed: None) -> None:
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "nope")
    assert code == 404
    assert "nope" in str(body)
    for path in ("..%2F..%2Fapi%2Fstatus", "%2F%2F127.0.0.1%2Fapi", "..%2Fdashboard%2F"):
        code, body = await fetch(jp_fetch, "clusters", A, "serve", path)
        assert code == 404, (path, body)
        assert "started" not in str(body), body  # Jupyter's /api/status
        assert "raylab" not in str(body).lower(), body


async def test_a_hung_app_gets_a_504_that_names_it(jp_fetch: Any, deployed: None) -> None:
    started = time.monotonic()
    code, body = await fetch(jp_fetch, "clusters", A, "serve", "hello", "slow")
    assert code == 504
    assert body["error"] == (
        f"the Serve app at /hello/slow on {A!r} did not answer within {TIMEOUT_S:g} s "
        "(c.Raylab.serve_timeout_s)"
    )
    assert time.monotonic() - started < TIMEOUT_S + 10
    code, _ = await fetch(jp_fetch, "clusters", A, "serve", "hello")  # still serving
    assert code == 200


def test_an_app_that_answers_requests_is_work_and_one_that_does_not_is_warned(
    deployed: None,
) -> None:
    # CPU clusters are never suspended by default; here after 2 min idle, warned 1 min ahead.
    settings = Settings.from_config(idle_suspend_minutes={"cpu": 2}, idle_warning_minutes=1)
    clock = Clock(start=time.time() + 600)  # any cell stamp of the deploying kernel, past
    with ledgers_put_back(settings.local_state_dir(), [OWNER]):
        sweeps_of_b(Culler(service().backend, settings, clock=clock), clock)


def sweeps_of_b(culler: Culler, clock: Clock) -> None:
    info = current(B)
    url, metrics = f"{info.endpoints.serve}/hello", info.endpoints.metrics
    assert metrics

    def served() -> float:
        return sum((culler.reader.serve.read(metrics) or {}).values())

    culler.sweep([current(B)])  # Serve's count so far: only a baseline
    for _ in range(3):  # an app called between every two sweeps, for longer than the limit
        before = served()
        get(url)
        until("Serve's count of the request", 60, lambda b=before: served() > b)  # type: ignore[misc]
        clock.advance(60)
        report = culler.sweep([current(B)])
        assert (report.active, report.warned) == (1, [])
    assert current(B).idle == IdleState()
    clock.advance(60)
    assert culler.sweep([current(B)]).idle == 1  # nobody called it since
    clock.advance(60)
    assert culler.sweep([current(B)]).warned == [B]
    culler.close()


async def test_down_takes_the_app_away(deployed: None, jp_fetch: Any) -> None:
    url = f"{current(B).endpoints.serve}/hello"
    service().delete(B)
    until(f"{B} gone", 120, lambda: service().backend.get(B) is None)
    with pytest.raises(OSError, match="refused"):
        get(url, timeout=5)
    code, body = await fetch(jp_fetch, "clusters", B, "serve", "hello")
    assert code == 404
    assert body == {"error": f"no cluster named {B!r}"}
