"""Reading GPU use when a card is opened (raylab/server/gpu_use.py): one dashboard
request per cluster per few seconds however many ask at once, on the culler's line, and
never over a newer reading in the server's cache. The real endpoint on a real cluster:
tests/server/test_gpu_use_api.py."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from raylab.backends.base import ClusterEvent
from raylab.culler.gpu_use import UseHistory
from raylab.errors import Conflict
from raylab.model import ClusterInfo, GpuReading, GpuUse, Phase
from raylab.server.cache import ClusterCache
from raylab.server.gpu_use import GpuUseReads
from raylab.spec import ClusterSpec


def cluster(gpus: int = 2, phase: Phase = Phase.READY, head_ready: bool = True) -> ClusterInfo:
    spec = ClusterSpec("c", gpus, "a100" if gpus else "cpu", 1, "1", "1Gi")
    return ClusterInfo("c", "alice", "local", phase, spec, head_ready=head_ready, uid="u1")


def use(at: float, utilization: float) -> GpuUse:
    return GpuUse("measured", at, gpus=(GpuReading("n", 0, "A100", utilization, 1.0, 2.0),))


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class SlowReader:
    """Stands in for ActivityReader: each read waits for `go`, then answers `at` = its
    count, so a burst of requests pile up on one read under way."""

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls = 0

    def read_gpu_use(self, info: ClusterInfo, busy_percent: float) -> GpuUse:
        self.calls += 1
        self.go.wait(10)
        return use(float(self.calls), 50.0)


def reads(reader: SlowReader, clock: Clock, history: UseHistory | None = None) -> GpuUseReads:
    return GpuUseReads(reader, history or UseHistory(), 5.0, clock=clock)  # type: ignore[arg-type]


def test_a_burst_of_opens_costs_one_read_and_a_later_one_reads_again() -> None:
    reader, clock = SlowReader(), Clock()
    r = reads(reader, clock)
    with ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(r.read, cluster()) for _ in range(8)]
        reader.go.set()
        got = [a.result(10) for a in answers]
    assert (reader.calls, r.reads) == (1, 1)
    assert {u.at for u in got} == {1.0}
    clock.now += 4.9
    assert r.read(cluster()).at == 1.0  # still fresh: answered again
    clock.now += 0.2
    again = r.read(cluster())
    assert (again.at, reader.calls) == (2.0, 2)
    assert again.history == ((1.0, 50.0), (2.0, 50.0))  # the line of the last hour


@pytest.mark.parametrize(
    ("info", "words"),
    [
        (cluster(phase=Phase.SUSPENDED), "is Suspended"),
        (cluster(gpus=0), "has no GPUs"),
        (cluster(head_ready=False), "is starting"),
    ],
)
def test_a_cluster_that_cannot_be_read_is_409(info: ClusterInfo, words: str) -> None:
    reader = SlowReader()
    with pytest.raises(Conflict, match=words) as err:
        reads(reader, Clock()).read(info)
    assert (err.value.status, reader.calls) == (409, 0)


def test_the_line_stays_in_time_order() -> None:
    """A card's reading taken while a sweep ran lands before the sweep's (taken at its
    start), which comes in after it."""
    history = UseHistory()
    history.add("u1", use(100.0, 10.0))
    history.add("u1", use(200.0, 30.0))  # the card's
    line = history.add("u1", use(150.0, 20.0)).history  # the sweep's, begun before
    assert line == ((100.0, 10.0), (150.0, 20.0), (200.0, 30.0))


def test_lines_without_a_point_in_the_hour_are_forgotten() -> None:
    """Without a sweep's `keep_only` (the server's culler off), deleted clusters' lines go."""
    history = UseHistory()
    history.add("gone", use(0.0, 10.0))
    history.add("u1", use(1800.0, 20.0))
    assert set(history._points) == {"gone", "u1"}
    history.add("u1", use(3601.0, 20.0))
    assert set(history._points) == {"u1"}


class NoBackend:
    namespace = None


def test_the_cache_keeps_the_newer_reading() -> None:
    cache = ClusterCache(NoBackend(), logging.getLogger("test"))  # type: ignore[arg-type]
    info = cluster()
    cache._apply(ClusterEvent("ADDED", info))

    def shown() -> GpuUse | None:
        got = cache.get("c")
        assert got is not None
        return got.gpu_use

    cache.set_cluster_gpu_use(info, use(200.0, 30.0))
    assert shown() == use(200.0, 30.0)
    cache.set_cluster_gpu_use(info, use(100.0, 10.0))  # older: dropped
    assert shown() == use(200.0, 30.0)
    # A sweep that began before the card's read: its figure stays, with the sweep's line.
    line = ((150.0, 20.0), (200.0, 30.0))
    cache.set_gpu_use({"u1": use(150.0, 20.0).with_history(line)})
    assert shown() == use(200.0, 30.0).with_history(line)
    cache.set_gpu_use({"u1": use(300.0, 40.0)})  # a later sweep's: shown
    assert shown() == use(300.0, 40.0)
