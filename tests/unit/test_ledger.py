"""GPU-hours with an injected clock: known durations give known totals, two meters of the
same cluster count it once, a restart continues, a deletion keeps what was used."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylab.culler.ledger import Interval, Meter, merge, usage_rows
from raylab.culler.ledger_store import LocalLedger
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec

T0 = 1_800_000_000.0
HOUR = 3600.0


def cluster(name: str, gpus: int, phase: Phase = Phase.READY, owner: str = "alice") -> ClusterInfo:
    spec = ClusterSpec(name=name, gpus=gpus, gpu_type="a100", workers=max(1, gpus),
                       cpus="1", memory="1Gi")  # fmt: skip
    return ClusterInfo(name=name, owner=owner, backend="local", phase=phase, spec=spec,
                       uid=f"uid-{name}")  # fmt: skip


def meter(ledger: LocalLedger, flush_s: float = 600) -> Meter:
    return Meter(ledger, flush_s=flush_s, retention_s=90 * 86400, max_gap_s=900)


def total(ledger: LocalLedger, owner: str | None = "alice") -> float:
    return sum(r.gpu_hours for r in usage_rows(ledger.load(owner, {}), 0, T0 + 10**7))


def test_known_durations_give_known_totals(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    m = meter(ledger)
    big, small = cluster("big", 4), cluster("small", 1)
    for t in range(0, int(HOUR) + 1, 60):
        m.observe([big, small], T0 + t)
    m.observe([cluster("big", 4, Phase.SUSPENDED), small], T0 + HOUR + 60)
    m.flush(T0 + HOUR + 60)
    rows = usage_rows(ledger.load("alice", {}), T0, T0 + 2 * HOUR)
    assert [(r.owner, r.gpu_type, r.clusters) for r in rows] == [("alice", "a100", 2)]
    # big: 4 GPUs x 1 h (billed until last seen running); small: 1 GPU x 1 h 1 min.
    assert rows[0].gpu_hours == pytest.approx(4 + 61 / 60, abs=1 / 3600)


def test_two_cullers_count_once(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    first, second = meter(ledger), meter(ledger)
    c = cluster("shared", 2)
    for t in range(0, int(HOUR) + 1, 30):
        first.observe([c], T0 + t)
        second.observe([c], T0 + t + 7)  # sweeping at other moments
    first.flush(T0 + HOUR)
    second.flush(T0 + HOUR + 7)
    second.flush(T0 + HOUR + 8)  # the same intervals again: idempotent
    assert total(ledger) == pytest.approx(2 * (HOUR + 7) / HOUR, abs=1 / 3600)


def test_a_restart_continues_and_a_deletion_keeps_the_hours(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    c = cluster("kept", 2)
    before = meter(ledger)
    before.observe([c], T0)
    before.observe([c], T0 + HOUR)
    before.flush(T0 + HOUR)
    after = meter(ledger)  # the server restarted; the cluster ran on meanwhile
    after.observe([c], T0 + HOUR + 120)
    after.observe([], T0 + 2 * HOUR)  # deleted (gone from the watch)
    after.flush(T0 + 2 * HOUR)
    assert total(ledger) == pytest.approx(2 * (HOUR + 120) / HOUR, abs=1 / 3600)


def test_a_gap_nobody_watched_is_not_counted(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    c = cluster("gap", 1)
    m = meter(ledger)
    m.observe([c], T0)
    m.observe([c], T0 + 600)
    m.flush(T0 + 600)
    later = meter(ledger)
    later.observe([c], T0 + 5 * HOUR)
    later.observe([c], T0 + 5 * HOUR + 600)
    later.flush(T0 + 5 * HOUR + 600)
    assert total(ledger) == pytest.approx(1200 / HOUR, abs=1 / 3600)


def test_pending_and_cpu_clusters_are_not_billed(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    m = meter(ledger)
    for t in (0, HOUR):
        m.observe([cluster("waiting", 8, Phase.PENDING), cluster("cpu", 0)], T0 + t)
    m.flush(T0 + HOUR)
    assert ledger.load(None, {}) == []


def test_scaling_splits_the_interval() -> None:
    a = Interval("u", "c", "alice", "a100", 2, T0, T0 + 100)
    b = Interval("u", "c", "alice", "a100", 4, T0 + 90, T0 + 200)
    merged = merge([a, b])
    assert [(i.gpus, i.start, i.end) for i in merged] == [(2, T0, T0 + 90), (4, T0 + 90, T0 + 200)]


def test_retention_drops_old_intervals(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    old = Interval("u1", "c", "alice", "a100", 1, T0, T0 + HOUR)
    new = Interval("u2", "d", "alice", "a100", 1, T0 + 100 * 86400, T0 + 100 * 86400 + HOUR)
    ledger.save("alice", [old, new], keep_after=T0 + 10 * 86400)
    assert ledger.load("alice", {}) == [new]
