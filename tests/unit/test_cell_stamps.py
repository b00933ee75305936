"""The kernel's cell stamps (raylab/kernel/cell_stamps.py) with a recording `mark`: one
write a minute per cluster at most, at once for a cluster newly connected to, never
while not connected, and a backend that fails costs the cell nothing."""

from __future__ import annotations

import threading
import time

from raylab.kernel.cell_stamps import CellStamps


class Recorder:
    def __init__(self) -> None:
        self.marks: list[str] = []
        self.done = threading.Event()
        self.fail = False

    def __call__(self, cluster: str, at: float) -> None:
        assert abs(at - time.time()) < 60
        self.marks.append(cluster)
        self.done.set()
        if self.fail:
            raise RuntimeError("the API server is away")


def settle(recorder: Recorder) -> None:
    assert recorder.done.wait(10)
    recorder.done.clear()
    time.sleep(0.05)  # the writer thread clears its pending flag after `mark`


def test_one_stamp_a_minute_per_cluster_and_at_once_for_a_new_one() -> None:
    connected: list[str | None] = ["a"]
    recorder = Recorder()
    stamps = CellStamps(lambda: connected[0], recorder)
    stamps.pre_run_cell()
    settle(recorder)
    stamps.post_run_cell()
    stamps.pre_run_cell()
    stamps.post_run_cell()
    time.sleep(0.2)
    assert recorder.marks == ["a"]  # within the minute: one write
    connected[0] = "b"  # connected to another cluster: it hears of the next cell at once
    stamps.pre_run_cell()
    settle(recorder)
    stamps.post_run_cell()
    assert recorder.marks == ["a", "b"]
    connected[0] = None
    stamps.pre_run_cell()
    stamps.post_run_cell()
    time.sleep(0.2)
    assert recorder.marks == ["a", "b"]  # not connected: nothing to stamp


def test_a_long_cell_is_stamped_while_it_runs_and_failures_stay_quiet() -> None:
    recorder = Recorder()
    recorder.fail = True
    stamps = CellStamps(lambda: "a", recorder, every_s=0.3)
    stamps.pre_run_cell()
    time.sleep(1.5)  # a cell running: stamps every period, from the ticker
    stamps.post_run_cell()
    assert len(recorder.marks) >= 3
