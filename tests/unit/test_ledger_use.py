"""Used against held GPU-hours in the ledger, with an injected clock: utilization read at
each sweep, integrated; flushes, two cullers and a restart count it once; records from
before it was read stay readable as "not measured"; a forged figure is never counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from raylab.culler.ledger import Meter, cluster_hours, usage_rows
from raylab.culler.ledger_store import LocalLedger
from raylab.display import render
from raylab.model import ClusterInfo, GpuReading, GpuUse, Phase
from raylab.spec import ClusterSpec

T0 = 1_800_000_000.0
HOUR = 3600.0


def cluster(gpus: int = 2) -> ClusterInfo:
    spec = ClusterSpec(name="c", gpus=gpus, gpu_type="a100", workers=1, cpus="1", memory="1Gi")
    return ClusterInfo(name="c", owner="alice", backend="local", phase=Phase.READY, spec=spec,
                       uid="uid-c")  # fmt: skip


def use(*utilizations: float, at: float = T0) -> dict[str, GpuUse]:
    gpus = tuple(GpuReading("10.0.0.2", i, "A100", u, 1000, 81920)
                 for i, u in enumerate(utilizations))  # fmt: skip
    return {"uid-c": GpuUse("measured", at, gpus=gpus)}


def meter(ledger: LocalLedger) -> Meter:
    return Meter(ledger, flush_s=600, retention_s=90 * 86400, max_gap_s=900)


def rows(ledger: LocalLedger) -> tuple[float, float, float]:
    [row] = usage_rows(ledger.load("alice", {}), 0, T0 + 10**7)
    return row.gpu_hours, row.used_gpu_hours, row.measured_gpu_hours


def test_utilization_is_integrated_beside_the_held_hours(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    m = meter(ledger)
    for t in range(0, int(HOUR) + 1, 60):  # flushes every 10 min rewrite the same stretch
        m.observe([cluster()], T0 + t, use(100, 0) if t <= HOUR / 2 else use(50, 50))
    m.flush(T0 + HOUR)
    held, used, measured = rows(ledger)
    # Half an hour at one busy GPU of two, then half an hour at two half-busy ones.
    assert (held, measured) == (pytest.approx(2.0), pytest.approx(2.0))
    assert used == pytest.approx(1.0, abs=0.02)
    assert m.used_added  # the last sweep's used seconds, for the metrics
    table = render.usage_table(usage_rows(ledger.load("alice", {}), 0, T0 + HOUR), 0,
                               everyone=False)  # fmt: skip
    assert "USED/HELD" in table
    assert "50%" in table


def test_unread_use_is_not_measured_never_zero(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    m = meter(ledger)
    logical = {"uid-c": GpuUse("not_measured", T0, "logical GPUs")}
    for t in range(0, int(HOUR) + 1, 60):
        m.observe([cluster()], T0 + t, logical)
    m.flush(T0 + HOUR)
    assert rows(ledger) == (pytest.approx(2.0), 0.0, 0.0)
    [row] = usage_rows(ledger.load("alice", {}), 0, T0 + HOUR)
    assert row.used_share is None
    assert render.usage_table([row], 0, everyone=False).splitlines()[-1].split()[-2:] == ["—", "—"]


def test_two_cullers_and_a_restart_count_use_once(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    first, second = meter(ledger), meter(ledger)
    for t in range(0, int(HOUR) + 1, 60):
        first.observe([cluster()], T0 + t, use(100, 100))
        second.observe([cluster()], T0 + t + 7, use(100, 100))
    first.flush(T0 + HOUR)
    second.flush(T0 + HOUR + 7)
    after = meter(ledger)  # a culler restarted; the cluster ran on
    after.observe([cluster()], T0 + HOUR + 60, use(100, 100))
    after.observe([cluster()], T0 + 2 * HOUR, use(100, 100))
    after.flush(T0 + 2 * HOUR)
    held, used, measured = rows(ledger)
    assert held == pytest.approx(4.0, abs=0.01)
    # The minute nobody read (the restart) is held but not measured.
    assert measured == pytest.approx(4.0 - 2 * 53 / 3600, abs=0.01)
    assert used == pytest.approx(measured, abs=0.01)
    per_cluster = cluster_hours(ledger.load("alice", {}), 0, T0 + 10**7, "used")
    assert per_cluster["uid-c"] == pytest.approx(used)


def test_old_records_read_and_forged_figures_are_dropped(tmp_path: Path) -> None:
    ledger = LocalLedger(tmp_path)
    m = meter(ledger)
    m.observe([cluster()], T0, use(100, 100))
    m.observe([cluster()], T0 + HOUR, use(100, 100))
    m.flush(T0 + HOUR)
    [path] = [p for p in (tmp_path / "usage").iterdir() if p.suffix == ".jsonl"]
    record = json.loads(path.read_text().splitlines()[0])
    cases = [
        {k: v for k, v in record.items() if k not in ("used", "measured")},  # before this
        {**record, "used": 9e9, "measured": 9e9},  # more than was held
        {**record, "used": 7200.0, "measured": 10.0},  # used over measured
        {**record, "used": "NaN"},
        {**record, "used": -1.0},
    ]
    for case in cases:
        path.write_text(json.dumps(case) + "\n")
        held, used, measured = rows(ledger)
        assert (held, used, measured) == (pytest.approx(2.0), 0.0, 0.0), case


def test_flushes_of_a_clock_with_fractions_keep_every_measured_second(tmp_path: Path) -> None:
    # Each flush writes the open stretch again; read back, it must be the same stretch
    # (no rounding of its start) and its use within what it held.
    ledger = LocalLedger(tmp_path)
    m = Meter(ledger, flush_s=300, retention_s=90 * 86400, max_gap_s=420)
    start = T0 + 0.1224453
    for k in range(61):
        m.observe([cluster()], start + 60 * k, use(100, 0))
    m.flush(start + HOUR)
    assert rows(ledger) == (pytest.approx(2.0), pytest.approx(1.0), pytest.approx(2.0))
