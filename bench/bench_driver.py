"""What the kernel's connection costs interactive Ray work: raylab's connection (a direct
driver on the local backend) against a driver started by hand on the same cluster
(`ray.init("HOST:PORT")` with the cluster's token), alternating in one run; Ray Client
(`ray.init("ray://…")`, what raylab used before) beside them.

The workload, each in a fresh Python process as a notebook kernel is: a task round trip,
an actor call round trip (medians of many), 2,000 tasks, `ray.put` and `ray.get` of
100 MB. Target: each ≤ 1.2× the hand-made driver.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from report import Figure, emit, median

from raylab.backends.local.backend import LocalBackend

CLUSTER = "bench-driver"
WORKLOAD = r"""
import json, statistics, sys, time
mode = sys.argv[1]
if mode == "raylab":
    from IPython.core.interactiveshell import InteractiveShell
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raylab")
    ip.run_line_magic("raycluster", "connect " + sys.argv[2])
import numpy as np
import ray
if mode != "raylab":
    ray.init(sys.argv[2], logging_level="WARNING")

@ray.remote
def nothing():
    return None

@ray.remote
class Echo:
    def call(self):
        return None

def timed(fn, n):
    out = []
    for _ in range(n):
        t = time.perf_counter(); fn(); out.append(time.perf_counter() - t)
    return statistics.median(out)

# Warm: a worker on every CPU of the cluster before timing (a session's first burst of
# tasks starts them; measured apart, below).
t = time.perf_counter(); ray.get([nothing.remote() for _ in range(200)])
first = time.perf_counter() - t
echo = Echo.remote(); ray.get(echo.call.remote())
big = np.ones(100 * 2**20, dtype=np.uint8)
result = {
    "task round trip": timed(lambda: ray.get(nothing.remote()), 50),
    "actor call round trip": timed(lambda: ray.get(echo.call.remote()), 100),
}
t = time.perf_counter(); ray.get([nothing.remote() for _ in range(2000)])
result["2,000 tasks"] = time.perf_counter() - t
result["first 200 tasks after connecting"] = first
# A get of a fresh 100 MB object is a fraction of a millisecond (zero-copy): 20 of each,
# so that the median is not one page fault's luck.
puts, gets = [], []
for _ in range(20):
    t = time.perf_counter(); ref = ray.put(big); puts.append(time.perf_counter() - t)
    t = time.perf_counter(); ray.get(ref); gets.append(time.perf_counter() - t)
    del ref
result["put 100 MB"] = statistics.median(puts)
result["get 100 MB"] = statistics.median(gets)
print("RESULT " + json.dumps(result), flush=True)
if mode == "raylab":  # as a kernel ends its session: the node it joined, if any, leaves
    ip.run_line_magic("raycluster", "disconnect")
"""


def _raylab(*args: str, env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-m", "raylab.cli", *args], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stdout + done.stderr)
    return done.stdout


def _workload(mode: str, target: str, env: dict[str, str]) -> dict[str, float]:
    done = subprocess.run([sys.executable, "-c", WORKLOAD, mode, target], env=env,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line.removeprefix("RESULT ")))
    raise RuntimeError(f"{mode}: {done.stdout}{done.stderr}")


def by_hand_env(env: dict[str, str], cluster: str) -> dict[str, str]:
    """`env` with what `raylab env CLUSTER` exports: the dashboard's address (for `ray job
    submit`) and the cluster's token, as a user's shell would have them."""
    shell = _raylab("env", cluster, "--backend", "local", env=env)
    exported = dict(
        ln.removeprefix("export ").split("=", 1) for ln in shell.splitlines()
        if ln.startswith("export ")
    )  # fmt: skip
    return {**env, **{k: v.strip("'\"") for k, v in exported.items()}}


def driver_figures(
    samples: dict[str, list[dict[str, float]]], prefix: str, anchor_name: str
) -> list[Figure]:
    """One figure per measure: raylab's against the driver by hand, Ray Client's named."""
    figures = []
    for measure in samples["raylab"][0]:
        ours = median([s[measure] for s in samples["raylab"]])
        hand_made = median([s[measure] for s in samples["driver"]])
        through_client = median([s[measure] for s in samples["client"]])
        # The first burst starts workers in the kernel's environment (its working dir):
        # what shipping it costs, once per connection, with no target of its own.
        first = measure.startswith("first")
        figures.append(
            Figure(
                name=f"{prefix}{measure} (Ray Client: {through_client:.3g} s)",
                value=ours,
                unit="s",
                target="reported" if first else "≤ 1.2× a driver by hand",
                anchor=hand_made,
                anchor_name=anchor_name,
                samples=[s[measure] for s in samples["raylab"]],
                anchor_samples=[s[measure] for s in samples["driver"]],
                met=None if first else ours <= 1.2 * hand_made,
            )
        )
    return figures


def run(rounds: int = 2) -> list[Figure]:
    samples: dict[str, list[dict[str, float]]] = {"raylab": [], "driver": [], "client": []}
    with tempfile.TemporaryDirectory(prefix="raylab-bench-driver-") as tmp:
        env = {**os.environ, "RAYLAB_STATE_DIR": str(Path(tmp) / "state")}
        env.update(JUPYTER_DATA_DIR=str(Path(tmp) / "data"), IPYTHONDIR=str(Path(tmp) / "ip"))
        _raylab("up", "--name", CLUSTER, "--workers", "1", "--cpus", "2", "--memory", "2Gi",
                "--gpus", "0", "--no-connect", "--backend", "local", env=env)  # fmt: skip
        try:
            hand = by_hand_env(env, CLUSTER)
            hand.pop("RAY_ADDRESS", None)  # the dashboard's, for `ray job submit`
            info = LocalBackend(Path(env["RAYLAB_STATE_DIR"])).get(CLUSTER)
            if info is None or not (info.endpoints.gcs and info.endpoints.client):
                raise RuntimeError(f"{CLUSTER} has no endpoints: {info}")
            gcs, client = info.endpoints.gcs, info.endpoints.client
            # Unmeasured: the first driver on a fresh cluster faults in the object store's
            # pages and starts its first workers, which whichever side went first paid.
            _workload("driver", gcs, hand)
            for i in range(rounds):
                pair = [("raylab", CLUSTER, env), ("driver", gcs, hand)]
                for mode, target, e in pair if i % 2 == 0 else reversed(pair):
                    samples[mode].append(_workload(mode, target, e))
            samples["client"].append(_workload("client", client, hand))
        finally:
            _raylab("down", CLUSTER, "--backend", "local", env=env)
    return driver_figures(samples, "", "ray.init(HOST:PORT) by hand")


if __name__ == "__main__":
    emit("raylab's connection against a driver by hand", run(int(os.environ.get("ROUNDS", "2"))),
         "driver")  # fmt: skip
