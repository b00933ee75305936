"""`POST <base_url>raylab/export` in a real Jupyter server."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from tests.export.support import make_notebook
from tests.server.conftest import as_user


async def post(jp_fetch: Any, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        resp = await jp_fetch("raylab", "export", method="POST", body=json.dumps(body),
                              headers=as_user("alice"))  # fmt: skip
    except HTTPClientError as exc:
        if exc.response is None:
            raise
        return exc.code, json.loads(exc.response.body)
    return resp.code, json.loads(resp.body)


async def test_export_writes_the_project_beside_the_notebook(
    jp_fetch: Any, jp_root_dir: Path
) -> None:
    (jp_root_dir / "work").mkdir()
    make_notebook(jp_root_dir / "work" / "train.ipynb", ["n = 2\nn * 21"])
    code, body = await post(jp_fetch, {"path": "work/train.ipynb", "schedule": "@daily"})
    assert code == 201, body
    assert body["out_dir"] == "work/train_pipeline"
    assert "train/definitions.py" in body["files"]
    assert body["report"].startswith("# train: a Dagster pipeline from train.ipynb")
    assert (jp_root_dir / "work/train_pipeline/EXPORT.md").read_text() == body["report"]
    code, again = await post(jp_fetch, {"path": "work/train.ipynb"})
    assert (code, again["error"].endswith("already exists; nothing was written")) == (409, True)
    code, _ = await post(jp_fetch, {"path": "work/train.ipynb", "force": True, "name": "v2",
                                    "out": "pipelines/v2"})  # fmt: skip
    assert code == 201
    assert (jp_root_dir / "pipelines/v2/v2/notebook.py").exists()


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"path": "../outside.ipynb"}, 422, "path"),
        ({"path": "/etc/passwd"}, 422, "path"),
        ({"path": "nb.ipynb", "out": "../../tmp/x"}, 422, "out"),
        ({"path": "nb.ipynb", "secret": 1}, 422, "secret"),
        ({"path": "nb.ipynb", "force": "yes"}, 422, "force"),
        ({"path": "nb.ipynb", "cluster": "nope"}, 404, None),
        ({"path": "missing.ipynb"}, 404, None),
        ({}, 422, "path"),
    ],
)
async def test_bad_requests_are_refused_with_json(
    jp_fetch: Any, jp_root_dir: Path, body: dict[str, Any], status: int,
    field: str | None,
) -> None:  # fmt: skip
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    code, reply = await post(jp_fetch, body)
    assert code == status, reply
    if field:
        assert reply["field"] == field
    assert not (jp_root_dir / "nb_pipeline").exists()


async def test_a_symlink_out_of_the_root_is_refused(
    jp_fetch: Any, jp_root_dir: Path, tmp_path_factory: Any
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    make_notebook(elsewhere / "nb.ipynb", ["x = 1"])
    (jp_root_dir / "link").symlink_to(elsewhere)
    code, reply = await post(jp_fetch, {"path": "link/nb.ipynb"})
    assert (code, reply["field"]) == (422, "path")
    assert not (elsewhere / "nb_pipeline").exists()
