"""Fuzzed REST bodies, paths and query strings: never a 500, always a JSON error, nothing made.

Quota zero makes even a valid body a refusal, so no Ray process starts; the property is
that every answer is one of raylab's JSON errors (or a plain success for reads) and the
state folder stays empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tornado.httpclient import HTTPClientError

from tests.reliability.test_fuzz_input import bodies, nasty_text
from tests.server.conftest import as_user

# What a URL can carry at all: lone surrogates cannot even be encoded by the client.
url_text = nasty_text.filter(lambda t: not any(0xD800 <= ord(c) <= 0xDFFF for c in t))

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {"max_clusters_per_user": 0, "max_gpus_per_user": 0}


def answer(loop: Any, jp_fetch: Any, *path: str, **kw: Any) -> tuple[int, Any]:
    try:
        resp = loop.run_until_complete(jp_fetch(*path, headers=as_user("fuzz"), **kw))
        return resp.code, resp.body
    except HTTPClientError as err:
        return err.code, err.response.body if err.response else b""


def check(code: int, body: bytes, state_dir: Path) -> None:
    assert code < 500, body
    if code >= 400:
        assert body, f"a {code} without raylab's JSON error body"
        payload = json.loads(body)
        assert payload["error"], payload
        assert "Traceback" not in payload["error"]
    assert not list(state_dir.glob("*/cluster.json"))


@FUZZ
@given(body=st.one_of(bodies.map(json.dumps), st.binary(max_size=200).map(repr)))
def test_post_bodies(jp_fetch: Any, jp_asyncio_loop: Any, state_dir: Path, body: str) -> None:
    code, text = answer(jp_asyncio_loop, jp_fetch, "raylab", "clusters", method="POST", body=body)
    assert code in (400, 403, 422), text
    check(code, text, state_dir)


@FUZZ
@given(name=url_text, body=bodies.map(json.dumps), method=st.sampled_from(["PATCH", "DELETE"]))
def test_cluster_paths(
    jp_fetch: Any, jp_asyncio_loop: Any, state_dir: Path, name: str, body: str, method: str
) -> None:
    kw: dict[str, Any] = {"method": method}
    if method == "PATCH":
        kw["body"] = body
    code, text = answer(jp_asyncio_loop, jp_fetch, "raylab", "clusters", name or "x", **kw)
    check(code, text, state_dir)


@FUZZ
@given(params=st.dictionaries(st.sampled_from(["all", "tail", "x"]), url_text, max_size=3))
def test_query_strings(
    jp_fetch: Any, jp_asyncio_loop: Any, state_dir: Path, params: dict[str, str]
) -> None:
    for path in (("clusters",), ("profiles",), ("clusters", "nosuch", "logs")):
        code, text = answer(jp_asyncio_loop, jp_fetch, "raylab", *path, params=params)
        check(code, text, state_dir)


def test_oversized_body_is_refused(jp_fetch: Any, jp_asyncio_loop: Any, state_dir: Path) -> None:
    body = json.dumps({"name": "big", "image": "x" * 200_000})
    code, text = answer(jp_asyncio_loop, jp_fetch, "raylab", "clusters", method="POST", body=body)
    assert code == 422
    assert json.loads(text)["field"] == "body"
    check(code, text, state_dir)
