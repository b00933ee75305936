"""What per-cluster token auth costs `up`: `%raycluster up --gpus 2` → connected kernel with
`c.Raylab.ray_auth = "token"` (the default) against the same with "disabled".

Each run is a fresh IPython process reading the setting from a Jupyter config file, as a
deployment would; the two alternate so that machine noise hits both alike. Target: the
ratio of medians ≤ 1.05×.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from bench_up import RAYLAB, measure
from report import Figure, emit, median


def _config(folder: Path, mode: str) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "jupyter_server_config.json").write_text(json.dumps({"Raylab": {"ray_auth": mode}}))
    return str(folder)


def run(rounds: int = 3) -> list[Figure]:
    on: list[float] = []
    off: list[float] = []
    with tempfile.TemporaryDirectory(prefix="raylab-bench-auth-") as tmp:
        configs = {m: _config(Path(tmp) / m, m) for m in ("token", "disabled")}
        state = str(Path(tmp) / "state")
        for i in range(rounds):
            pair = [(on, "token"), (off, "disabled")]
            for samples, mode in pair if i % 2 == 0 else reversed(pair):
                samples.append(measure(RAYLAB, state, JUPYTER_CONFIG_DIR=configs[mode]))
    value, anchor = median(on), median(off)
    return [
        Figure(
            name="up --gpus 2 → connected, token auth on (median)",
            value=value,
            unit="s",
            target="≤ 1.05× auth off",
            anchor=anchor,
            anchor_name="the same with ray_auth = disabled",
            samples=on,
            anchor_samples=off,
            met=value <= 1.05 * anchor,
        )
    ]


if __name__ == "__main__":
    emit("Token auth's cost to up", run(int(os.environ.get("ROUNDS", "3"))), "auth")
