"""`%load_ext raylab` cost in a fresh IPython process (target ≤ 150 ms; Ray loads lazily).

Anchor: `%load_ext autoreload`, an extension that ships with IPython, measured alike.
"""

from __future__ import annotations

import subprocess
import sys

from report import Figure, emit, median

PROBE = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
t0 = time.perf_counter()
ip.run_line_magic("load_ext", "{ext}")
elapsed = time.perf_counter() - t0
import sys
assert "ray" not in sys.modules, "loading raylab imported Ray"
print(elapsed * 1000)
"""


def measure(ext: str) -> float:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(ext=ext)], capture_output=True, text=True, check=True
    )
    return float(out.stdout.strip().splitlines()[-1])


def run(rounds: int = 9) -> list[Figure]:
    ours, anchor = [], []
    for _ in range(rounds):
        ours.append(measure("raylab"))
        anchor.append(measure("autoreload"))
    value = median(ours)
    return [
        Figure(
            name="%load_ext raylab (median)",
            value=value,
            unit="ms",
            target="≤ 150 ms",
            anchor=median(anchor),
            anchor_name="%load_ext autoreload",
            samples=ours,
            anchor_samples=anchor,
            met=value <= 150,
        )
    ]


if __name__ == "__main__":
    emit("Import cost", run(), "import")
