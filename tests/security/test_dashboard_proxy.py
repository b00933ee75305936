"""Attack: the Ray dashboard proxy as a way into Jupyter.

The dashboard's pages come from the user's head, which runs whatever code its owner (or
a job) put there. Through the proxy they would run in Jupyter's origin: able to read
Jupyter's XSRF cookie and call Jupyter's API as whoever views them. So every proxied
response is sandboxed (an opaque origin), and a browser gets a key in the URL that opens
this one dashboard, for this one viewer, and nothing of Jupyter. Writes through the proxy
need Jupyter's XSRF token as every other cookie-authenticated write does, and neither
Jupyter's token nor its XSRF field ever reaches the head.

A real Jupyter server and a real local Ray cluster, found through the server's cache;
where a test must see what reaches the dashboard, the cluster's dashboard address points
at a recorder (upstream.py) for that test only.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import pytest
from tornado.httpclient import HTTPClientError, HTTPResponse

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.jobs.api import JobsApi
from raylab.model import Phase
from raylab.server.dashboard_page import STORAGE_SHIM
from raylab.service import ClusterService
from tests.security.upstream import Seen, recording_upstream
from tests.server.conftest import as_user
from tests.server.test_security import login_cookie

OWNER = "alice"
NAME = "secdash"
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-downloads"
XSRF = "2|abcdef01|0123456789abcdef0123456789abcdef|1700000000"
DASHBOARD = ("raylab", "clusters", NAME, "dashboard")
NO_TOKEN = {"Authorization": ""}  # jp_fetch adds the server's token unless told
NAVIGATE = {"Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "iframe"}  # a browser's frame


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    settings = Settings.from_config()
    svc = ClusterService(LocalBackend(settings.local_state_dir()), settings, OWNER)
    try:
        svc.create({"name": NAME, "workers": 0, "cpus": "1"})
        svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
        yield NAME
    finally:
        if svc.backend.get(NAME) is not None:
            svc.delete(NAME)


@pytest.fixture
def upstream(jp_serverapp: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Seen]]:
    backend = jp_serverapp.web_app.settings["raylab_cache"].backend
    with recording_upstream() as (address, seen):
        monkeypatch.setattr(backend, "dashboard_address", lambda info: address)
        yield seen


async def browser(jp_fetch: Any) -> dict[str, str]:
    """alice's browser: Jupyter's login cookie, no token."""
    return {**NO_TOKEN, **as_user(OWNER), "Cookie": await login_cookie(jp_fetch)}


def assert_sandboxed(resp: HTTPResponse) -> None:
    policies = resp.headers.get_list("Content-Security-Policy")
    assert any(SANDBOX in p for p in policies), policies
    assert not any("allow-same-origin" in p for p in policies), policies


async def status(jp_fetch: Any, *path: str, **kw: Any) -> tuple[int, HTTPResponse]:
    resp = await jp_fetch(*path, raise_error=False, follow_redirects=False, **kw)
    return resp.code, resp


async def test_proxied_pages_run_in_an_opaque_origin(jp_fetch: Any, cluster: str) -> None:
    page = await jp_fetch(*DASHBOARD, "", headers=as_user(OWNER))
    assert b"Ray" in page.body
    assert_sandboxed(page)
    # Where the sandbox has no storage and no cookies, the page gets stand-ins before its
    # own scripts, or Ray's app renders nothing (tests/ui sees it render, sandboxed).
    assert page.body.index(b"<script") == page.body.index(STORAGE_SHIM)
    assert_sandboxed(await jp_fetch(*DASHBOARD, "api", "version", headers=as_user(OWNER)))


async def test_a_head_cannot_loosen_the_sandbox(
    jp_fetch: Any, cluster: str, upstream: list[Seen]
) -> None:
    """Its own Content-Security-Policy is kept beside the sandbox, never instead of it;
    streamed answers (the proxy copies their headers itself) too."""
    for accept in ("application/json", "text/event-stream"):
        resp = await jp_fetch(*DASHBOARD, "api", "x", headers={**as_user(OWNER), "Accept": accept})
        assert_sandboxed(resp)
    assert len(upstream) == 2


async def test_a_browser_gets_a_key_that_opens_this_dashboard_alone(
    jp_fetch: Any, cluster: str
) -> None:
    # Inside the sandbox a page's requests carry no cookie: a navigation to the dashboard
    # (what the sidebar's tab and the magic's link do) is sent on to a key for it.
    navigate = {**await browser(jp_fetch), **NAVIGATE}
    code, resp = await status(jp_fetch, *DASHBOARD, "", headers=navigate)
    assert code == 302
    found = re.fullmatch(
        rf".*/raylab/clusters/{NAME}/dashboard/~([\w-]+)/", resp.headers["Location"]
    )
    assert found, resp.headers["Location"]
    key = f"~{found.group(1)}"

    # The key alone (no cookie, no token) opens the dashboard and its API, sandboxed, and
    # readable from the sandbox's opaque origin; the key is not sent on to other sites.
    page = await jp_fetch(*DASHBOARD, key, "", headers={**NO_TOKEN, **NAVIGATE})
    assert b"Ray" in page.body
    assert_sandboxed(page)
    assert page.headers["Referrer-Policy"] == "no-referrer"
    version = await jp_fetch(
        *DASHBOARD, key, "api", "version", headers={**NO_TOKEN, "Origin": "null"}
    )
    assert b'"ray_version": "2.60' in version.body
    assert version.headers["Access-Control-Allow-Origin"] == "*"

    # Nothing else: not Jupyter's API, not raylab's, not another cluster's dashboard.
    for path in (("api", "status"), ("api", "contents"), ("raylab", "clusters")):
        code, _ = await status(jp_fetch, *path, params={"token": key[1:]}, headers=NO_TOKEN)
        assert code == 403, path
    code, _ = await status(jp_fetch, "raylab", "clusters", "other", "dashboard", key, "",
                           headers=NO_TOKEN)  # fmt: skip
    assert code == 403

    # A made-up key opens nothing; a browser that navigates with one (an expired key, a
    # restarted server) is sent back to get a new one through Jupyter's login.
    code, _ = await status(jp_fetch, *DASHBOARD, "~made-up", "api", "version", headers=NO_TOKEN)
    assert code == 403
    code, resp = await status(jp_fetch, *DASHBOARD, "~made-up", "", headers=navigate)
    assert code == 302
    assert resp.headers["Location"].endswith(f"/raylab/clusters/{NAME}/dashboard/")
    # Someone who may not see the cluster gets no key for it.
    code, _ = await status(jp_fetch, *DASHBOARD, "", headers={**navigate, **as_user("bob")})
    assert code == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH", "DELETE"])
async def test_a_cross_site_form_cannot_write_through_the_proxy(
    jp_fetch: Any, cluster: str, upstream: list[Seen], method: str
) -> None:
    cookie = await browser(jp_fetch)
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    body = None if method == "DELETE" else "entrypoint=rm+-rf+~"
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch(*DASHBOARD, "api", "jobs", "", method=method, body=body,
                       headers={**cookie, **form}, allow_nonstandard_methods=True)  # fmt: skip
    assert err.value.code == 403
    assert b"_xsrf&#39; argument missing" in (
        err.value.response.body if err.value.response else b""
    )
    assert upstream == []
    # The sidebar's way (ServerConnection sends the header): forwarded, and the header
    # Jupyter checked is not.
    sidebar = {**cookie, "Cookie": f"{cookie['Cookie']}; _xsrf={XSRF}", "X-XSRFToken": XSRF}
    resp = await jp_fetch(*DASHBOARD, "api", "jobs", "", method=method, body=body and "{}",
                          headers=sidebar, allow_nonstandard_methods=True)  # fmt: skip
    assert resp.code == 200
    [seen] = upstream
    assert (seen.method, seen.path) == (method, "/api/jobs")
    assert {"x-xsrftoken", "cookie", "authorization"}.isdisjoint(seen.headers)
    assert seen.headers["x-ray-authorization"].startswith("Bearer ")


async def test_jupyters_token_and_xsrf_field_never_reach_the_head(
    jp_fetch: Any, jp_ws_fetch: Any, jp_serverapp: Any, cluster: str, upstream: list[Seen]
) -> None:
    token = jp_serverapp.identity_provider.token
    user = {**NO_TOKEN, **as_user(OWNER)}
    # In the URL (how JupyterLab authenticates websockets, and a `?token=` link).
    params = {"token": token, "keep": "1", "_xsrf": XSRF}
    await jp_fetch(*DASHBOARD, "api", "x", params=params, headers=user)
    assert upstream[-1].path == "/api/x?keep=1"
    ws = await jp_ws_fetch(*DASHBOARD, "api", "ws", params={"token": token}, headers=user)
    assert await asyncio.wait_for(ws.read_message(), 30) is None  # the recorder refuses it
    assert upstream[-1].path == "/api/ws"
    # In a form body, which Jupyter reads both from too.
    sidebar = {**await browser(jp_fetch), "X-XSRFToken": XSRF,
               "Content-Type": "application/x-www-form-urlencoded"}  # fmt: skip
    sidebar["Cookie"] += f"; _xsrf={XSRF}"
    body = f"token={token}&keep=1&_xsrf={quote(XSRF)}"
    await jp_fetch(*DASHBOARD, "api", "x", method="POST", body=body, headers=sidebar)
    assert upstream[-1].body == b"keep=1"
    # A multipart form with either field is refused rather than rewritten.
    multipart = {**sidebar, "Content-Type": "multipart/form-data; boundary=b"}
    parts = f'--b\r\nContent-Disposition: form-data; name="_xsrf"\r\n\r\n{XSRF}\r\n--b--\r\n'
    code, _ = await status(jp_fetch, *DASHBOARD, "api", "x", method="POST", body=parts,
                           headers=multipart)  # fmt: skip
    assert code == 400
    assert len(upstream) == 3
    for seen in upstream:
        assert token not in f"{seen.path} {seen.headers} {seen.body!r}"
        assert "_xsrf" not in f"{seen.path} {seen.body!r}"


async def test_the_jobs_api_beside_it_is_the_owners_alone(jp_fetch: Any, cluster: str) -> None:
    """`clusters/NAME/jobs` (the sidebar's job list and log view) reads the cluster's Jobs
    API with its token: the owner's only, as connecting is; others get what the dashboard
    would give them without it: nothing."""
    backend = LocalBackend(Settings.from_config().local_state_dir())
    info = backend.get(NAME)
    assert info is not None
    api = JobsApi(NAME, backend.dashboard_address(info) or "", backend.auth_token(NAME))
    api.submit("listed", "echo from-the-job", None, {"raylab_cell": "<job listed: a, In [2]>"})
    for _ in range(120):
        if api.get("listed").finished:
            break
        await asyncio.sleep(0.5)
    code, resp = await status(jp_fetch, "raylab", "clusters", NAME, "jobs", headers=as_user(OWNER))
    assert code == 200
    jobs = {j["name"]: j for j in json_of(resp)["jobs"]}
    assert jobs["listed"]["status"] == "SUCCEEDED"
    assert jobs["listed"]["cell"] == "<job listed: a, In [2]>"
    logs = ("raylab", "clusters", NAME, "jobs", "listed", "logs")
    code, resp = await status(jp_fetch, *logs, headers=as_user(OWNER))
    assert code == 200
    assert "from-the-job" in json_of(resp)["logs"]
    assert (await status(jp_fetch, *logs, headers=as_user("bob")))[0] == 404
    code, resp = await status(jp_fetch, *logs, headers=as_user("admin"))
    assert code == 403
    assert "only alice, who owns" in json_of(resp)["error"]
    bad = ("raylab", "clusters", NAME, "jobs", quote("a\x07b", safe=""), "logs")
    code, resp = await status(jp_fetch, *bad, headers=as_user(OWNER))
    assert code == 422
    assert "is not a job name" in json_of(resp)["error"]
    missing = ("raylab", "clusters", NAME, "jobs", "nothere", "logs")
    assert (await status(jp_fetch, *missing, headers=as_user(OWNER)))[0] == 404


def json_of(resp: HTTPResponse) -> Any:
    return json.loads(resp.body)
