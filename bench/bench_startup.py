"""Start-up reliability of local clusters on a small machine.

N consecutive `up --gpus 2 --workers 2` then `down` (a head and two 1-GPU workers, as in
the README's first example), in three settings:

- alone: nothing else runs;
- with a CPU hog: a busy loop pinned to one of the cores, at the same priority;
- Binder-like: the whole run inside a cgroup of 1 CPU and 2 GiB, with `--workers 1`
  (the quick-start notebook's shape there), where the machine offers cgroup v1 `cpu` and
  `memory` controllers we may write to (else reported as skipped).

Each figure: successes out of N (target: all), and the median and worst time to Ready.
A failure keeps the node's reason (what `%raycluster status` would say). `ROUNDS` sets N
(default 20); `BINDER_ROUNDS` the Binder setting's own N (default: `ROUNDS`), since its
rounds are the slowest and its target is a report, not 20/20.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

from report import Figure, emit, median

DRIVER = """
import json, os, sys, time
from raylab.backends.local import LocalBackend
from raylab.config import Settings
from raylab.errors import RaylabError
from raylab.model import Phase
from raylab.service import ClusterService

rounds, workers = int(sys.argv[1]), int(sys.argv[2])
settings = Settings.from_config()
svc = ClusterService(LocalBackend(settings.local_state_dir()), settings, "bench")
for i in range(rounds):
    name = f"start{i}"
    t0 = time.monotonic()
    svc.create({"name": name, "gpus": 2, "workers": workers, "cpus": "1", "memory": "1Gi"})
    try:
        svc.wait(name, lambda c: c.phase == Phase.READY, timeout=600)
        outcome = ""
    except RaylabError as exc:
        outcome = exc.message
    print(json.dumps({"seconds": time.monotonic() - t0, "error": outcome}), flush=True)
    svc.delete(name)
"""

CGROUP_ROOT = Path("/sys/fs/cgroup")


@contextlib.contextmanager
def cpu_hog() -> Iterator[None]:
    """A busy loop on core 0, as an unrelated program would be."""
    code = "import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n"
    hog = subprocess.Popen([sys.executable, "-c", code])
    try:
        yield
    finally:
        hog.kill()
        hog.wait()


def binder_cgroup() -> list[Path] | None:
    """Fresh cgroups (v1) limiting to 1 CPU and 2 GiB, or None where we cannot make them."""
    made = []
    limits = {
        "cpu": {"cpu.cfs_period_us": "100000", "cpu.cfs_quota_us": "100000"},
        "memory": {"memory.limit_in_bytes": str(2 * 2**30)},
    }
    try:
        for controller, files in limits.items():
            group = CGROUP_ROOT / controller / f"raylab-bench-{os.getpid()}"
            group.mkdir()
            made.append(group)
            for name, value in files.items():
                (group / name).write_text(value)
    except OSError:
        for group in made:
            group.rmdir()
        return None
    return made


def run_rounds(rounds: int, workers: int, groups: list[Path] | None = None) -> list[dict]:
    def enter_groups() -> None:
        for group in groups or []:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    with tempfile.TemporaryDirectory(prefix="raylab-bench-") as state:
        env = dict(os.environ, RAYLAB_STATE_DIR=state, RAY_USAGE_STATS_ENABLED="0")
        out = subprocess.run(
            [sys.executable, "-c", DRIVER, str(rounds), str(workers)],
            capture_output=True, text=True, env=env, preexec_fn=enter_groups, timeout=7200,
        )  # fmt: skip
    results = [json.loads(ln) for ln in out.stdout.splitlines() if ln.startswith("{")]
    if len(results) < rounds:
        raise RuntimeError(out.stdout[-2000:] + out.stderr[-4000:])
    return results


def figures(setting: str, shape: str, results: list[dict]) -> list[Figure]:
    ok = [r["seconds"] for r in results if not r["error"]]
    errors = sorted({r["error"] for r in results if r["error"]})
    rounds = len(results)
    return [
        Figure(
            name=f"{shape}, {setting}: came up"
            + (f" (failed: {'; '.join(errors)})" if errors else ""),
            value=len(ok),
            unit=f"/ {rounds}",
            target=f"{rounds}/{rounds}",
            met=len(ok) == rounds,
        ),
        Figure(
            name=f"{shape}, {setting}: time to Ready (median)",
            value=median(ok),
            unit="s",
            target="—",
            samples=ok,
        ),
        Figure(
            name=f"{shape}, {setting}: time to Ready (worst)",
            value=max(ok, default=float("nan")),
            unit="s",
            target="—",
            samples=ok,
        ),
    ]


def run(rounds: int = 20, binder_rounds: int | None = None) -> list[Figure]:
    two = "up --gpus 2 --workers 2"
    out = figures("alone", two, run_rounds(rounds, 2))
    with cpu_hog():
        out += figures("one core busy", two, run_rounds(rounds, 2))
    groups = binder_cgroup()
    one = "up --gpus 2 --workers 1"
    if groups is None:
        out.append(Figure(f"{one}, 1 CPU + 2 GiB: skipped (no writable cgroup v1)", 0, "", "—"))
        return out
    try:
        out += figures(
            "1 CPU + 2 GiB (Binder)", one, run_rounds(binder_rounds or rounds, 1, groups)
        )
    finally:
        for group in groups:
            with contextlib.suppress(OSError):
                group.rmdir()
    return out


if __name__ == "__main__":
    rounds = int(os.environ.get("ROUNDS", "20"))
    binder = int(os.environ.get("BINDER_ROUNDS", rounds))
    emit("Local cluster start-up reliability", run(rounds, binder), "startup")
