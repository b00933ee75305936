"""The README's card is the card: its rows, their order and wording are what
`render.card_fields` shows for the cluster the README describes."""

from __future__ import annotations

import re
import time
from pathlib import Path

from raylab.display import render
from raylab.model import ClusterEnvironment, ClusterInfo, Endpoints, Phase
from raylab.spec import ClusterSpec

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_card() -> tuple[str, list[list[str]]]:
    text = README.read_text()
    block = text.split("While it waits you see a live card", 1)[1].split("```", 2)[1]
    first, *rows = block.strip("\n").splitlines()
    return first, [re.split(r"\s{2,}", row.strip(), maxsplit=1) for row in rows]


def test_the_readme_card_is_what_up_shows() -> None:
    title, rows = readme_card()
    assert title.split() == ["demo", "Starting"]
    now = time.time()
    info = ClusterInfo(
        name="demo", owner="you", backend="local", phase=Phase.STARTING,
        reason="waiting for workers", head_ready=True, workers_ready=1, workers_desired=2,
        spec=ClusterSpec(name="demo", gpus=2, gpu_type="a100", workers=2, cpus="12",
                         memory="96Gi"),
        created=now - 14,
        endpoints=Endpoints(client="ray://127.0.0.1:40123", gcs="127.0.0.1:40121"),
        ray_version="2.60.0", python_version="3.11", logical_gpus=True,
        environment=ClusterEnvironment(working_dir="/nb", working_dir_bytes=int(3.2 * 2**20)),
    )  # fmt: skip
    assert rows == [list(r) for r in render.card_fields(info, now - 14, now=now)]
