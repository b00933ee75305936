"""Time from `%raycluster up --gpus 2` to a connected kernel, against raw Ray doing the same.

Raw Ray: `ray start --head --num-gpus=2` then `ray.init("127.0.0.1:PORT")`, a direct
driver as raylab's kernel is on this machine (what a user types by hand). raylab:
`%raycluster up --gpus 2` in a fresh IPython process — a head plus one 2-GPU worker,
waited for and connected. Both run alternately, each in a fresh process, so machine
noise hits both alike; the target is the ratio of medians, ≤ 1.10×.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile

from report import Figure, emit, median

RAYLAB = """
import time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
t0 = time.perf_counter()
ip.run_line_magic("raycluster", "up --name bench --gpus 2")
import ray
assert ray.cluster_resources()["GPU"] == 2
elapsed = time.perf_counter() - t0
ip.run_line_magic("raycluster", "down bench")
print("ELAPSED", elapsed)
"""

# Ray by hand: what every by-hand side starts with (bench_first_task.py too).
BY_HAND = """
import os, socket, subprocess, sys, time
from pathlib import Path
from raylab.backends.local.processes import CLUSTER_ENV, NodeProcess, stop_sessions

def free():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

gcs = free()
ray_bin = str(Path(sys.executable).with_name("ray"))

# A token, as every raylab cluster has: the nodes and this driver all present it.
os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=os.urandom(32).hex())
# Marked as raylab marks its nodes, so that raylab's stop_sessions ends them at the end.
env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", **{CLUSTER_ENV: "bench-raw"})
"""

RAW = (
    BY_HAND
    + """
t0 = time.perf_counter()
starter = subprocess.Popen(
    [ray_bin, "start", "--head", f"--port={gcs}", "--num-gpus=2",
     "--dashboard-host=127.0.0.1", "--disable-usage-stats"],
    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
starter.wait()
import ray
ray.init(f"127.0.0.1:{gcs}")
assert ray.cluster_resources()["GPU"] == 2
elapsed = time.perf_counter() - t0
ray.shutdown()
# `ray start` daemonised the node inside its session: end that session, not every Ray here.
stop_sessions([NodeProcess("head", 0, starter.pid, 1.0, "")], "bench-raw")
print("ELAPSED", elapsed)
"""
)


def measure(code: str, state_dir: str, **extra_env: str) -> float:
    """The ELAPSED figure the code prints."""
    return figures(code, state_dir, **extra_env)["ELAPSED"]


def figures(code: str, state_dir: str, **extra_env: str) -> dict[str, float]:
    """Run `code` in a fresh Python process; the `NAME SECONDS` lines it prints."""
    # Both sides with Ray's token auth on, as raylab's clusters run by default (raylab
    # gives its nodes and the kernel their own token; the raw side makes one).
    env = dict(
        os.environ, RAYLAB_STATE_DIR=state_dir, RAY_USAGE_STATS_ENABLED="0", **extra_env
    )  # fmt: skip
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=900
    )
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-4000:])
    printed = {}
    for words in (line.split() for line in out.stdout.splitlines()):
        if len(words) == 2 and words[0].isupper():
            with contextlib.suppress(ValueError):  # a log line of two words, not a figure
                printed[words[0]] = float(words[1])
    return printed


def run(rounds: int = 3) -> list[Figure]:
    ours, raw = [], []
    with tempfile.TemporaryDirectory(prefix="raylab-bench-") as state:
        for i in range(rounds):
            pair = [(ours, RAYLAB), (raw, RAW)]
            for samples, code in pair if i % 2 == 0 else reversed(pair):
                samples.append(measure(code, state))
    value, anchor = median(ours), median(raw)
    return [
        Figure(
            name="%raycluster up --gpus 2 → connected (median)",
            value=value,
            unit="s",
            target="≤ 1.10× raw Ray",
            anchor=anchor,
            anchor_name="ray start --head + ray.init(HOST:PORT)",
            samples=ours,
            anchor_samples=raw,
            met=value <= 1.10 * anchor,
        )
    ]


if __name__ == "__main__":
    emit("Cluster start to connected kernel", run(int(os.environ.get("ROUNDS", "3"))), "up")
