"""Attack: request bodies that Python's `json` accepts but JSON does not, or that break it.

`json.loads` takes `NaN`, `Infinity` and `-Infinity`, turns `1e400` into inf, keeps the
last of two equal keys, and raises RecursionError (a 500) on deeply nested arrays. Each
body goes to the three endpoints that read one (POST clusters, PATCH clusters/NAME, POST
export) of a real Jupyter server: the answer is a 4xx with raylab's JSON error naming the
field, and nothing is created (no cluster, no export folder).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.export.support import make_notebook
from tests.server.conftest import as_user

ENDPOINTS = [
    ("POST", ("clusters",), {"name": "demo"}),
    ("PATCH", ("clusters", "demo"), {}),
    ("POST", ("export",), {"path": "nb.ipynb"}),
]
# (what the field holds, written as raw JSON text)
NOT_FINITE = ["NaN", "Infinity", "-Infinity", "1e400", "-1e400"]
DEEP = 5000  # far past the interpreter's recursion limit


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    # Were a body accepted, the quota would still refuse it: no Ray process ever starts.
    return {"max_clusters_per_user": 0, "max_gpus_per_user": 0}


async def send(jp_fetch: Any, method: str, path: tuple[str, ...], body: str) -> tuple[int, Any]:
    try:
        resp = await jp_fetch("raylab", *path, method=method, body=body, headers=as_user("eve"))
    except HTTPClientError as err:
        return err.code, json.loads(err.response.body if err.response else b"{}")
    return resp.code, json.loads(resp.body)


async def assert_nothing_made(jp_fetch: Any, root: Path, state_dir: Path) -> None:
    resp = await jp_fetch("raylab", "clusters", headers=as_user("eve"))
    assert json.loads(resp.body)["clusters"] == []
    assert not list(state_dir.glob("*/cluster.json"))
    assert not (root / "nb_pipeline").exists()


def with_raw(fields: dict[str, Any], key: str, raw: str) -> str:
    """`fields` as JSON with one more member whose value is the raw text `raw`."""
    head = json.dumps(fields)[:-1]
    return f"{head}{', ' if fields else ''}{json.dumps(key)}: {raw}}}"


@pytest.mark.parametrize(("method", "path", "fields"), ENDPOINTS)
@pytest.mark.parametrize("number", NOT_FINITE)
async def test_numbers_json_does_not_allow_are_refused_naming_the_field(
    jp_fetch: Any, jp_root_dir: Path, state_dir: Path, method: str, path: tuple[str, ...],
    fields: dict[str, Any], number: str,
) -> None:  # fmt: skip
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    # idle_suspend_minutes took any float (NaN compares false with every limit); workers
    # and force would fail later for other reasons: the number itself must be named.
    key = {"clusters": "idle_suspend_minutes", "export": "force"}.get(path[-1], "workers")
    code, reply = await send(jp_fetch, method, path, with_raw(fields, key, number))
    assert code == 422, reply
    assert reply["field"] == key
    assert "finite" in reply["error"], reply
    await assert_nothing_made(jp_fetch, jp_root_dir, state_dir)


@pytest.mark.parametrize(("method", "path", "fields"), ENDPOINTS)
@pytest.mark.parametrize("where", ["top", "member", "in a list"])
async def test_non_finite_numbers_anywhere_in_the_body_are_refused(
    jp_fetch: Any, jp_root_dir: Path, state_dir: Path, method: str, path: tuple[str, ...],
    fields: dict[str, Any], where: str,
) -> None:  # fmt: skip
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    body = {
        "top": "NaN",
        "member": with_raw(fields, "extra", '{"deeper": NaN}'),
        "in a list": with_raw(fields, "extra", "[1, 2, Infinity]"),
    }[where]
    code, reply = await send(jp_fetch, method, path, body)
    assert code == 422, reply
    assert reply["field"] == ("body" if where == "top" else "extra")
    assert "finite" in reply["error"], reply
    await assert_nothing_made(jp_fetch, jp_root_dir, state_dir)


@pytest.mark.parametrize(("method", "path", "fields"), ENDPOINTS)
@pytest.mark.parametrize("shape", ["arrays", "objects", "inside a field"])
async def test_deeply_nested_bodies_are_a_422_not_a_500(
    jp_fetch: Any, jp_root_dir: Path, state_dir: Path, method: str, path: tuple[str, ...],
    fields: dict[str, Any], shape: str,
) -> None:  # fmt: skip
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    body = {
        "arrays": "[" * DEEP + "]" * DEEP,
        "objects": '{"a": ' * DEEP + "1" + "}" * DEEP,
        "inside a field": with_raw(fields, "name", "[" * DEEP + "]" * DEEP),
    }[shape]
    code, reply = await send(jp_fetch, method, path, body)
    assert code == 422, reply
    assert reply["field"] == "body"
    assert "nested" in reply["error"]
    await assert_nothing_made(jp_fetch, jp_root_dir, state_dir)


@pytest.mark.parametrize(("method", "path", "fields"), ENDPOINTS)
async def test_nesting_is_bounded_well_below_the_recursion_limit(
    jp_fetch: Any, jp_root_dir: Path, state_dir: Path, method: str, path: tuple[str, ...],
    fields: dict[str, Any],
) -> None:  # fmt: skip
    """33 levels parse fine in Python; no raylab field needs more than a few."""
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    code, reply = await send(jp_fetch, method, path, with_raw(fields, "x", "[" * 33 + "]" * 33))
    assert (code, reply["field"]) == (422, "body"), reply
    assert "nested" in reply["error"]
    await assert_nothing_made(jp_fetch, jp_root_dir, state_dir)


@pytest.mark.parametrize(("method", "path", "fields"), ENDPOINTS)
async def test_a_key_given_twice_is_refused(
    jp_fetch: Any, jp_root_dir: Path, state_dir: Path, method: str, path: tuple[str, ...],
    fields: dict[str, Any],
) -> None:  # fmt: skip
    """Two parsers may keep different copies (a proxy checks the first, Python keeps the
    last): a body that says two things is refused instead of picking one."""
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    body = with_raw({**fields, "cells": "all"}, "cells", '"tagged"')
    code, reply = await send(jp_fetch, method, path, body)
    assert (code, reply["field"]) == (422, "cells"), reply
    assert "twice" in reply["error"]
    await assert_nothing_made(jp_fetch, jp_root_dir, state_dir)
