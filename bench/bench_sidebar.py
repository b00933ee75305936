"""The sidebar with 200 clusters, measured in Chromium through Playwright.

Targets: first render of 200 cluster cards ≤ 200 ms; applying one update event ≤ 16 ms
(one frame at 60 Hz). Each measure runs from the event's JSON text entering the model
(the path the server's event stream takes) to the DOM committed and laid out.
`bench/bench_sidebar.ts` does the measuring in a real JupyterLab started here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from report import Figure, emit, median, p95  # noqa: E402

from tests.ui.lab_server import playwright_env, running_lab  # noqa: E402


def measure() -> dict[str, list[float]]:
    npx = shutil.which("npx")
    if npx is None:
        raise RuntimeError("npx is missing: install Node.js and run `npm ci`")
    with tempfile.TemporaryDirectory(prefix="raylab-bench-sidebar-") as tmp:
        out = Path(tmp) / "samples.json"
        with running_lab() as lab:
            env = playwright_env(lab, RAYLAB_BENCH_OUT=str(out), RAYLAB_PW_BENCH="1")
            result = subprocess.run(
                [npx, "playwright", "test", "--config", "tests/ui/playwright.config.ts"],
                cwd=REPO,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if result.returncode != 0 or not out.exists():
                raise RuntimeError(
                    f"playwright failed ({result.returncode}):\n{result.stdout[-4000:]}"
                    f"{result.stderr[-4000:]}\n--- jupyter lab log ---\n{lab.log_tail()}"
                )
        samples: dict[str, list[float]] = json.loads(out.read_text())
        return samples


def run() -> list[Figure]:
    samples = measure()
    first, update = samples["first"], samples["update"]
    return [
        Figure(
            name="sidebar: first render of 200 cards (median)",
            value=median(first),
            unit="ms",
            target="≤ 200 ms",
            samples=first,
            met=median(first) <= 200,
        ),
        Figure(
            name="sidebar: one update event among 200 cards (median)",
            value=median(update),
            unit="ms",
            target="≤ 16 ms",
            samples=update,
            met=median(update) <= 16,
        ),
        Figure(
            name="sidebar: one update event among 200 cards (p95)",
            value=p95(update),
            unit="ms",
            target="≤ 16 ms",
            samples=update,
            met=p95(update) <= 16,
        ),
    ]


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    emit("Sidebar rendering in Chromium", run(), "sidebar")
