"""One card in every door: the rows of tests/packaging/card_rows.json (cluster JSON in,
rows out) are what `render.card_fields` makes, what the notebook card and the terminal
card show, and what the sidebar's `cardFields` (render.ts, run in Node by
card_rows.test.mjs) makes of the same JSON.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylab.display import render, widgets
from raylab.model import (
    ClusterEnvironment,
    ClusterInfo,
    Endpoints,
    GpuUse,
    IdleState,
    Phase,
    QueueInfo,
)
from raylab.serving.model import ServeApps
from raylab.spec import ClusterSpec
from tests.ci import cannot_run

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
CASES: list[dict[str, Any]] = json.loads((HERE / "card_rows.json").read_text())
RENDER_JS = ROOT / "labextension" / "lib" / "render.js"


@pytest.fixture(autouse=True)
def utc() -> Iterator[None]:
    """The fixture's clock times ("suspends at 00:16") are UTC, in both languages."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "UTC"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


def cluster(data: dict[str, Any]) -> ClusterInfo:
    """ClusterInfo from the JSON the REST API serves (`ClusterInfo.to_json`)."""
    fields = {k: v for k, v in data.items() if k not in ("gpus", "gpu_type")}
    env = fields["environment"]
    return ClusterInfo(
        **{
            **fields,
            "phase": Phase(fields["phase"]),
            "spec": ClusterSpec(**fields["spec"]),
            "endpoints": Endpoints(**fields["endpoints"]),
            "idle": IdleState(**fields["idle"]),
            "queue": QueueInfo.from_json(fields.get("queue")),
            "gpu_use": GpuUse.from_json(fields.get("gpu_use")),
            "serve": ServeApps.from_json(fields.get("serve")),
            "environment": None if env is None else ClusterEnvironment(
                **{k: tuple(v) if isinstance(v, list) else v for k, v in env.items()}
            ),
        }
    )  # fmt: skip


def rows(case: dict[str, Any]) -> list[list[str]]:
    info = cluster(case["cluster"])
    made = render.card_fields(
        info, case.get("started"), now=case["now"], owner=case.get("owner", False)
    )
    return [list(r) for r in made]


@pytest.mark.parametrize("case", CASES, ids=[c["case"] for c in CASES])
def test_card_fields_make_the_fixtures_rows(case: dict[str, Any]) -> None:
    assert rows(case) == case["rows"]


OWN = [c for c in CASES if not c.get("owner")]  # a notebook shows its owner's own cluster


@pytest.mark.parametrize("case", OWN, ids=[c["case"] for c in OWN])
def test_the_notebook_card_and_the_terminal_card_show_those_rows(
    case: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(time, "time", lambda: case["now"])  # the cards read the clock
    info, started = cluster(case["cluster"]), case.get("started")
    card = render.card_html(info, started)
    shown = re.findall(r"<tr><th[^>]*>(.*?)</th><td[^>]*>(.*?)</td></tr>", card)
    assert [[html.unescape(k), html.unescape(v)] for k, v in shown] == case["rows"]
    text = widgets.card_text(info, started).splitlines()
    assert text == [info.name, *(f"{k}: {v}" for k, v in case["rows"])]


def test_the_fixture_covers_every_row() -> None:
    keys = {k for case in CASES for k, _ in case["rows"]}
    assert keys == {"Phase", "Workers", "Autoscaling", "GPUs", "GPU use", "Per worker", "Age",
                    "Elapsed",
                    "Owner", "Queue", "Ray", "Environment", "Connection", "Serve",
                    "Idle"}  # fmt: skip


def test_the_sidebar_makes_the_same_rows() -> None:
    if shutil.which("node") is None:
        cannot_run("Node.js is not installed")
    if not RENDER_JS.is_file():
        cannot_run("labextension not built (npm run build:lib)")
    done = subprocess.run(
        ["node", "--test", str(HERE / "card_rows.test.mjs")],
        capture_output=True, text=True, timeout=120, env={**os.environ, "TZ": "UTC"},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"# pass {len(CASES)}" in done.stdout, done.stdout
