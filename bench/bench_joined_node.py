"""What joining a cluster as the kernel's own Ray node costs (kernel/joined_node.py: how a kernel
in a pod becomes a direct driver of a KubeRay cluster): raylab's `join` against the same
`ray start --address=GCS --num-cpus=0 --num-gpus=0 --block` typed by hand, alternating in
one run, on a local cluster of this machine (a notebook pod's node is the same processes).

Measured: the time until the node is up, the memory its processes hold (RSS, summed over
the node's processes once it is up and idle), the shared memory its object store may
take, and the time to leave. Target: joining ≤ 1.1× the hand-made `ray start`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
from bench_driver import CLUSTER, _raylab
from report import Figure, emit, median

from raylab.backends.local.backend import LocalBackend
from raylab.kernel import joined_node

RAY = str(Path(sys.executable).with_name("ray"))
SETTLE_S = 5.0  # the node's agents finish their imports before RSS is read


def _rss(root: int) -> float:
    """MiB held by `root` and everything under it."""
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return float("nan")
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def _by_hand(gcs: str, log: Path) -> tuple[float, float, float]:
    t = time.perf_counter()
    with open(log, "wb") as out:
        node = subprocess.Popen(
            [RAY, "start", f"--address={gcs}", "--num-cpus=0", "--num-gpus=0",
             "--disable-usage-stats", "--block"],
            stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    while joined_node.READY_TEXT not in log.read_text(errors="replace"):
        if node.poll() is not None:
            raise RuntimeError(log.read_text())
        time.sleep(0.05)
    joined = time.perf_counter() - t
    time.sleep(SETTLE_S)
    rss = _rss(node.pid)
    t = time.perf_counter()
    os.killpg(node.pid, signal.SIGTERM)
    node.wait(30)
    return joined, rss, time.perf_counter() - t


def _raylab_join(gcs: str) -> tuple[float, float, float]:
    t = time.perf_counter()
    node = joined_node.join(gcs)
    joined = time.perf_counter() - t
    time.sleep(SETTLE_S)
    rss = _rss(node.supervisor.pid)
    t = time.perf_counter()
    node.leave()
    return joined, rss, time.perf_counter() - t


def run(rounds: int = 3) -> list[Figure]:
    ours: list[tuple[float, float, float]] = []
    hand: list[tuple[float, float, float]] = []
    with tempfile.TemporaryDirectory(prefix="raylab-bench-join-") as tmp:
        env = {**os.environ, "RAYLAB_STATE_DIR": str(Path(tmp) / "state")}
        env.update(JUPYTER_DATA_DIR=str(Path(tmp) / "data"), IPYTHONDIR=str(Path(tmp) / "ip"))
        _raylab("up", "--name", CLUSTER, "--workers", "1", "--cpus", "1", "--memory", "1Gi",
                "--gpus", "0", "--no-connect", "--backend", "local", env=env)  # fmt: skip
        saved = dict(os.environ)
        try:
            shell = _raylab("env", CLUSTER, "--backend", "local", env=env)
            for line in shell.splitlines():
                if line.startswith("export RAY_AUTH"):
                    key, value = line.removeprefix("export ").split("=", 1)
                    os.environ[key] = value.strip("'\"")
            info = LocalBackend(Path(env["RAYLAB_STATE_DIR"])).get(CLUSTER)
            if info is None or not info.endpoints.gcs:
                raise RuntimeError(f"{CLUSTER} has no GCS endpoint: {info}")
            for i in range(rounds):
                pair = [
                    (ours, lambda: _raylab_join(info.endpoints.gcs or "")),
                    (hand, lambda: _by_hand(info.endpoints.gcs or "", Path(tmp) / "hand.log")),
                ]
                for into, measure in pair if i % 2 == 0 else reversed(pair):
                    into.append(measure())
        finally:
            os.environ.clear()
            os.environ.update(saved)
            _raylab("down", CLUSTER, "--backend", "local", env=env)
    store = joined_node.object_store_bytes() / 2**20
    names = [("join: node up", "s", "≤ 1.1× by hand"), ("node's memory (RSS)", "MiB",
             "reported"), ("leave: node gone", "s", "reported")]  # fmt: skip
    figures = []
    for k, (name, unit, target) in enumerate(names):
        value, anchor = median([s[k] for s in ours]), median([s[k] for s in hand])
        figures.append(
            Figure(
                name=name if k else f"{name} (object store may take {store:.0f} MiB of shm)",
                value=value,
                unit=unit,
                target=target,
                anchor=anchor,
                anchor_name="ray start --address … --num-cpus=0 by hand",
                samples=[s[k] for s in ours],
                anchor_samples=[s[k] for s in hand],
                met=value <= 1.1 * anchor if k == 0 else None,
            )
        )
    return figures


if __name__ == "__main__":
    emit("the kernel's own node against ray start by hand",
         run(int(os.environ.get("ROUNDS", "3"))), "joined_node")  # fmt: skip
