"""A cell run as a Ray Job: from submitting to its first line in the cell, against
`ray job submit` of the same script by hand (with the cluster's token, the same folder as
working dir), alternating in one run on one local cluster. Target ≤ 1.2×.

Then a job printing 10,000 lines: they reach the cell complete and in order (the
figure is the time from submitting to the last one).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_driver import by_hand_env
from report import Figure, emit, median

CLUSTER = "bench-jobs"
FIRST = "print('first line', flush=True)\nimport time\ntime.sleep(1)\n"
LINES = 10_000
TRIAL = r"""
import io, json, sys, time
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
ip.run_line_magic("raycluster", "connect " + sys.argv[1])

class Clock(io.TextIOBase):
    # Each line the cell shows, with when it was shown.
    def __init__(self):
        self.lines, self.partial = [], ""
    def write(self, text):
        now = time.perf_counter()
        self.partial += text
        *done, self.partial = self.partial.split("\n")
        self.lines += [(now, x) for x in done]
        return len(text)

def cell(source):
    clock, real = Clock(), sys.stdout
    sys.stdout = clock
    began = time.perf_counter()
    try:
        ip.run_cell(source)
    finally:
        sys.stdout = real
    return began, clock.lines

result = {}
began, lines = cell("%%raycluster job first-" + sys.argv[2] + "\n" + sys.argv[3])
result["first"] = next(t for t, x in lines if x == "first line") - began
if sys.argv[4] == "lines":
    began, lines = cell("%%raycluster job lines-" + sys.argv[2] +
                        "\nfor i in range(%d):\n    print(i)\n" % int(sys.argv[5]))
    numbers = [x for _, x in lines if x.isdigit()]
    result["in order"] = numbers == [str(i) for i in range(int(sys.argv[5]))]
    result["lines"] = lines[-1][0] - began
print("RESULT " + json.dumps(result))
"""


def _raylab(*args: str, env: dict[str, str], cwd: Path | None = None) -> str:
    done = subprocess.run([sys.executable, "-m", "raylab.cli", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)  # fmt: skip
    if done.returncode:
        raise RuntimeError(done.stdout + done.stderr)
    return done.stdout


def _ours(env: dict[str, str], folder: Path, i: int, lines: bool) -> dict[str, float]:
    argv = [sys.executable, "-c", TRIAL, CLUSTER, str(i), FIRST,
            "lines" if lines else "-", str(LINES)]  # fmt: skip
    done = subprocess.run(argv, env=env, cwd=folder, capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return dict(json.loads(line.removeprefix("RESULT ")))
    raise RuntimeError(f"raylab: {done.stdout[-3000:]}{done.stderr[-3000:]}")


def _by_hand(env: dict[str, str], folder: Path, i: int) -> float:
    ray = Path(sys.executable).with_name("ray")
    argv = [str(ray), "job", "submit", "--submission-id", f"hand-{i}", "--working-dir",
            str(folder), "--", "python", "first.py"]  # fmt: skip
    began = time.perf_counter()
    with subprocess.Popen(argv, env=env, cwd=folder, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True) as proc:  # fmt: skip
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.strip() == "first line":
                took = time.perf_counter() - began
                proc.stdout.read()
                return took
    raise RuntimeError(f"ray job submit never showed its first line (exit {proc.returncode})")


def run(rounds: int = 3) -> list[Figure]:
    ours: list[float] = []
    hand: list[float] = []
    with tempfile.TemporaryDirectory(prefix="raylab-bench-jobs-") as tmp:
        folder = Path(tmp) / "notebook"
        folder.mkdir()
        (folder / "first.py").write_text(FIRST)
        (folder / "helper.py").write_text("def f():\n    return 1\n")
        env = {**os.environ, "RAYLAB_STATE_DIR": str(Path(tmp) / "state")}
        env.update(JUPYTER_DATA_DIR=str(Path(tmp) / "data"), IPYTHONDIR=str(Path(tmp) / "ip"))
        _raylab("up", "--name", CLUSTER, "--workers", "1", "--cpus", "2", "--memory", "2Gi",
                "--no-connect", "--backend", "local", env=env, cwd=folder)  # fmt: skip
        try:
            hand_env = by_hand_env(env, CLUSTER)
            _by_hand(hand_env, folder, -1)  # both ways: the folder uploaded once before
            lines = _ours(env, folder, -1, lines=True)
            for i in range(rounds):
                if i % 2:
                    hand.append(_by_hand(hand_env, folder, i))
                    ours.append(_ours(env, folder, i, lines=False)["first"])
                else:
                    ours.append(_ours(env, folder, i, lines=False)["first"])
                    hand.append(_by_hand(hand_env, folder, i))
        finally:
            _raylab("down", CLUSTER, "--backend", "local", env=env)
    first = Figure(
        name="%%raycluster job: submit → first line in the cell",
        value=median(ours),
        unit="s",
        target="≤ 1.2× ray job submit by hand",
        anchor=median(hand),
        anchor_name="ray job submit (same script, same folder)",
        samples=ours,
        anchor_samples=hand,
        met=median(ours) <= 1.2 * median(hand),
    )
    in_order = bool(lines["in order"])
    return [
        first,
        Figure(
            name=f"{LINES:,} lines reach the cell (complete, in order: {in_order})",
            value=float(lines["lines"]),
            unit="s",
            target="complete and in order",
            met=in_order,
        ),
    ]


if __name__ == "__main__":
    emit("a cell as a Ray Job against ray job submit", run(int(os.environ.get("ROUNDS", "3"))),
         "jobs")  # fmt: skip
