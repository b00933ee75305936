"""Attack: a name or key that ends in a newline passes a pattern written `^…$` with `match`.

`re.match(r"^[a-z0-9-]+$", "demo\\n")` matches (`$` also matches before a final newline),
so "demo\\n" became a cluster. Every pattern that checks a user's input now matches the
whole string: cluster names and images through a real Jupyter server (refused, nothing
created), `--env` keys through the parser function, quantities, durations and the
export's requirements through a notebook's `%pip` line.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from raylab.config import Settings
from raylab.errors import SpecError
from raylab.export import export_notebook
from raylab.spec import parse_duration, parse_quantity
from raylab.sync.values import parse_env
from tests.export.support import make_notebook
from tests.server.conftest import as_user


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    # Were a name accepted, the quota would still refuse it: no Ray process ever starts.
    return {"max_clusters_per_user": 0, "max_gpus_per_user": 0}


async def post_cluster(jp_fetch: Any, body: dict[str, Any]) -> tuple[int, Any]:
    try:
        resp = await jp_fetch("raylab", "clusters", method="POST", body=json.dumps(body),
                              headers=as_user("eve"))  # fmt: skip
    except HTTPClientError as err:
        return err.code, json.loads(err.response.body if err.response else b"{}")
    return resp.code, json.loads(resp.body)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"name": "demo\n"}, "name"),
        ({"name": "demo", "image": "rayproject/ray:2.60.0-py311\n"}, "image"),
        ({"name": "demo", "cpus": "2", "memory": "4Gi", "gpus\n": 1}, "body"),
    ],
)
async def test_a_trailing_newline_is_refused_and_nothing_is_created(
    jp_fetch: Any, state_dir: Path, body: dict[str, Any], field: str
) -> None:
    code, reply = await post_cluster(jp_fetch, body)
    assert (code, reply["field"]) == (422, field), reply
    resp = await jp_fetch("raylab", "clusters", headers=as_user("eve"))
    assert json.loads(resp.body)["clusters"] == []
    assert not list(state_dir.glob("*/cluster.json"))


@pytest.mark.parametrize("item", ["K\n=v", "K\n"])
def test_env_keys_with_a_newline_are_refused(item: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_env([item], environ={"K\n": "kernel value", "K": "x"})
    assert err.value.field == "env"
    assert "not a variable name" in err.value.reason


@pytest.mark.parametrize("text", ["16\n", "64Gi\n", "500m\n"])
def test_quantities_with_a_trailing_newline_are_refused(text: str) -> None:
    with pytest.raises(ValueError, match="\n"):
        parse_quantity(text)


@pytest.mark.parametrize(
    "value",
    ["1" + "0" * 400, "9" * 400 + "m", 10**400, float("nan")],
    ids=["400 digits", "400 digits and a unit", "a 401-digit int", "nan"],
)
def test_durations_are_finite(value: object) -> None:
    """(A trailing newline is whitespace that a duration sheds, as a CLI's "30m "; what
    the same check let through was a number: 400 digits are inf, and NaN passes every
    comparison with a limit.)"""
    with pytest.raises(ValueError, match=re.escape(str(value)[:20])):  # the value, as given
        parse_duration(value)


def test_a_requirement_with_a_newline_is_not_declared(tmp_path: Path) -> None:
    nb = make_notebook(
        tmp_path / "nb.ipynb",
        ["get_ipython().run_line_magic('pip', \"install 'numpy==2.1\\n' rich\")", "x = 1"],
    )
    result = export_notebook(nb, settings=Settings.from_config(), out_dir=tmp_path / "out")
    pyproject = (result.out_dir / "pyproject.toml").read_text()
    assert '"rich"' in pyproject
    assert "numpy" not in pyproject
