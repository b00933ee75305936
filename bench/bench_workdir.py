"""Connect with a 50 MiB working directory: first, unchanged again, and without sync.

One local cluster, one process acting as the kernel. Each round writes new content (50
MiB that does not compress, and a small package), then times `%raycluster connect` with
it the first time (raylab lists the files; Ray hashes, zips and uploads them, and the
node unpacks them), the same folder again unchanged (Ray finds the package already on
the cluster and on the node), and `--no-sync`, in alternating order so that noise hits
both alike. Target: the unchanged reconnect ≤ 1.10× the no-sync connect (medians); the
first is reported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from report import Figure, emit, median

KERNEL = """
import io, json, os, sys, time
from contextlib import redirect_stdout
from raylab.cli import TerminalOutput
from raylab.commands import Commands

rounds, folder = int(sys.argv[1]), sys.argv[2]
commands = Commands(TerminalOutput(), prog="%raycluster", may_connect=True)
quiet = lambda argv: commands.run(argv)
with redirect_stdout(io.StringIO()):
    quiet(["up", "--name", "bench-wd", "--workers", "1", "--cpus", "1", "--memory", "1Gi",
           "--gpus", "0", "--gpu-type", "cpu", "--no-connect", "--no-sync"])

def connect(*options):
    t0 = time.perf_counter()
    with redirect_stdout(io.StringIO()):
        quiet(["connect", "bench-wd", *options])
    elapsed = time.perf_counter() - t0
    import ray
    ray.get(ray.remote(lambda: 1).remote())  # the connection works (not timed)
    with redirect_stdout(io.StringIO()):
        quiet(["disconnect"])
    return elapsed

times = {"first": [], "unchanged": [], "no-sync": []}
try:
    connect("--no-sync")  # warm-up: the first Ray Client connect of a cluster is slower
    for i in range(rounds):
        os.makedirs(os.path.join(folder, "mylib"), exist_ok=True)
        with open(os.path.join(folder, "mylib", "__init__.py"), "w") as fh:
            fh.write(f"ROUND = {i}\\n")
        with open(os.path.join(folder, "weights.bin"), "wb") as fh:
            fh.write(os.urandom(50 * 2**20))
        times["first"].append(connect("--working-dir", folder))
        pair = [("unchanged", ("--working-dir", folder)), ("no-sync", ("--no-sync",))]
        for name, options in pair if i % 2 == 0 else reversed(pair):
            times[name].append(connect(*options))
finally:
    with redirect_stdout(io.StringIO()):
        quiet(["down", "bench-wd"])
print("TIMES " + json.dumps(times))
"""


def run(rounds: int = 5) -> list[Figure]:
    import json

    with tempfile.TemporaryDirectory(prefix="raylab-bench-") as tmp:
        env = dict(
            os.environ, RAYLAB_STATE_DIR=os.path.join(tmp, "state"), RAY_USAGE_STATS_ENABLED="0",
            JUPYTER_DATA_DIR=os.path.join(tmp, "data"),
        )  # fmt: skip
        folder = os.path.join(tmp, "notebook")
        os.makedirs(folder)
        out = subprocess.run(
            [sys.executable, "-c", KERNEL, str(rounds), folder],
            capture_output=True, text=True, env=env, timeout=1800, cwd=tmp,
        )  # fmt: skip
    if out.returncode != 0:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-4000:])
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("TIMES "))
    times: dict[str, list[float]] = json.loads(line[6:])
    first, unchanged, bare = (median(times[k]) for k in ("first", "unchanged", "no-sync"))
    return [
        Figure(
            name="connect, 50 MiB working dir, unchanged (median)",
            value=unchanged,
            unit="s",
            target="≤ 1.10× no-sync connect",
            anchor=bare,
            anchor_name="connect --no-sync",
            samples=times["unchanged"],
            anchor_samples=times["no-sync"],
            met=unchanged <= 1.10 * bare,
        ),
        Figure(
            name="connect, 50 MiB working dir, first time (median)",
            value=first,
            unit="s",
            target="reported",
            anchor=bare,
            anchor_name="connect --no-sync",
            samples=times["first"],
            anchor_samples=times["no-sync"],
        ),
    ]


if __name__ == "__main__":
    emit("Working directory sync on connect", run(int(os.environ.get("ROUNDS", "5"))), "workdir")
