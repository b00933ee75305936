"""The culler's idle rules with an injected clock: warning, suspension, Keep running, and
what happens while activity cannot be read (the written rule in culler/rules.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylab.culler.activity import Activity
from raylab.culler.rules import Action, Decision, Policy, decide, policy_for
from raylab.errors import SpecError
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec, parse_duration

POLICY = Policy(limit_s=3600, warning_s=600, unknown_grace_s=1800)
IDLE, ACTIVE = Activity("idle"), Activity("active", "a driver is connected")
UNKNOWN = Activity("unknown", "the dashboard is unreachable")
T0 = 1_800_000_000.0


def run(steps: list[tuple[float, Activity]], policy: Policy = POLICY) -> list[Decision]:
    """Sweeps at T0 + each offset; each stores what it decided (as a backend would)."""
    state, out = IdleState(), []
    for offset, activity in steps:
        decision = decide(state, activity, T0 + offset, policy)
        out.append(decision)
        state = decision.idle
    return out


def test_idle_then_warned_then_suspended() -> None:
    first, early, warn, before, suspend = run(
        [(0, IDLE), (60, IDLE), (3000, IDLE), (3540, IDLE), (3600, IDLE)]
    )
    assert (first.action, first.idle) == (Action.RECORD, IdleState(since=T0))
    assert early.action == Action.NONE
    assert warn.action == Action.WARN
    assert warn.idle == IdleState(since=T0, suspend_at=T0 + 3600)
    assert before.action == Action.NONE
    assert suspend.action == Action.SUSPEND
    assert suspend.idle == IdleState(since=T0, suspended_at=T0 + 3600)


def test_a_late_culler_still_gives_the_whole_warning() -> None:
    # First seen idle already past the warning time (the culler was away): the owner
    # still gets ten minutes, and a warning is stored before any suspension.
    state = IdleState(since=T0)
    warn = decide(state, IDLE, T0 + 7200, POLICY)
    assert warn.action == Action.WARN
    assert warn.idle.suspend_at == T0 + 7200 + 600
    assert decide(warn.idle, IDLE, T0 + 7799, POLICY).action == Action.NONE
    assert decide(warn.idle, IDLE, T0 + 7800, POLICY).action == Action.SUSPEND


def test_no_warning_time_still_warns_for_one_sweep() -> None:
    policy = Policy(limit_s=60, warning_s=0, unknown_grace_s=0)
    _, warn, suspend = run([(0, IDLE), (60, IDLE), (61, IDLE)], policy)
    assert (warn.action, suspend.action) == (Action.WARN, Action.SUSPEND)


def test_activity_clears_the_clock() -> None:
    *_, warned, used = run([(0, IDLE), (3000, IDLE), (3100, ACTIVE)])
    assert warned.action == Action.WARN
    assert (used.action, used.idle) == (Action.RECORD, IdleState())
    # Idle again: a fresh clock.
    again = decide(used.idle, IDLE, T0 + 3200, POLICY)
    assert again.idle == IdleState(since=T0 + 3200)


def test_keep_running_restarts_the_clock() -> None:
    # Keep running stores an empty state (service.keep_running): the next sweep starts over.
    decision = decide(IdleState(), IDLE, T0 + 5000, POLICY)
    assert decision.idle == IdleState(since=T0 + 5000)


def test_unknown_never_suspends_and_a_short_gap_keeps_the_clock() -> None:
    warned = IdleState(since=T0, suspend_at=T0 + 3600)
    blip = decide(warned, UNKNOWN, T0 + 4000, POLICY)  # past suspend_at, yet unreadable
    assert blip.action == Action.RECORD
    assert blip.idle == IdleState(
        since=T0, suspend_at=T0 + 3600, unknown_since=T0 + 4000, unknown_reason=UNKNOWN.why
    )
    assert decide(blip.idle, UNKNOWN, T0 + 4060, POLICY).action == Action.NONE
    # Readable and idle again within the grace: the kept clock suspends it.
    assert decide(blip.idle, IDLE, T0 + 4100, POLICY).action == Action.SUSPEND


def test_a_long_unknown_stretch_restarts_the_clock() -> None:
    state = IdleState(since=T0, suspend_at=T0 + 3600, unknown_since=T0 + 100)
    long = decide(state, UNKNOWN, T0 + 100 + 1800, POLICY)
    assert long.idle == IdleState(unknown_since=T0 + 100, unknown_reason=UNKNOWN.why)
    back = decide(long.idle, IDLE, T0 + 2000, POLICY)
    assert back.idle == IdleState(since=T0 + 2000)
    # However long unreadable, never a suspension.
    forever = decide(long.idle, UNKNOWN, T0 + 10**6, POLICY)
    assert forever.action in (Action.NONE, Action.RECORD)


def test_a_limit_of_zero_turns_it_off() -> None:
    off = Policy(limit_s=0, warning_s=600, unknown_grace_s=0)
    assert run([(0, IDLE), (10**6, IDLE)], off)[-1].action == Action.NONE
    leftover = IdleState(since=T0, suspend_at=T0 + 10)
    assert decide(leftover, IDLE, T0 + 20, off) == Decision(Action.RECORD, IdleState())


def spec(**fields: object) -> ClusterSpec:
    return ClusterSpec.from_mapping(fields, Profiles())


def info_of(s: ClusterSpec) -> ClusterInfo:
    return ClusterInfo(name=s.name, owner="alice", backend="local", phase=Phase.READY, spec=s)


def test_policy_per_gpu_type_and_the_users_own_limit() -> None:
    profiles = Profiles()
    gpu = info_of(spec(gpus=1, gpu_type="a100"))
    cpu = info_of(spec())
    mine = info_of(spec(gpus=1, gpu_type="a100", idle_suspend_minutes="30m"))
    assert policy_for(gpu, profiles, 10, 30) == Policy(3600, 600, 1800)
    assert policy_for(cpu, profiles, 10, 30).limit_s == 0
    assert policy_for(mine, profiles, 10, 30).limit_s == 1800
    # On CPU clusters (off by the admin) a user may still ask for a limit.
    own = info_of(spec(idle_suspend_minutes="90s"))
    assert policy_for(own, profiles, 10, 30) == Policy(90, 90, 1800)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("2h", "120 min is more than allowed; a100 clusters suspend after at most 60 min idle "
               "(set by your admin): ask for 60m or less"),
        ("0", "0 would never suspend; a100 clusters suspend after at most 60 min idle "
              "(set by your admin): ask for 60m or less"),
        ("soon", "'soon' is not a duration such as 30m or 2h"),
    ],
)  # fmt: skip
def test_asking_for_more_than_the_admin_is_one_clear_line(value: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        spec(gpus=1, gpu_type="a100", idle_suspend_minutes=value)
    assert err.value.for_command_line() == f"--idle-suspend: {message}"


def test_durations() -> None:
    assert [parse_duration(v) for v in ("30m", "90s", "2h", "1d", "5", 1.5)] == [
        1800,
        90,
        7200,
        86400,
        300,
        90,
    ]


def test_the_annotation_is_canonical_and_round_trips() -> None:
    from raylab.backends.kuberay.manifest import idle_annotation, idle_from_annotation

    state = IdleState(since=T0 + 0.7, suspend_at=T0 + 3600.2, unknown_reason="")
    text = idle_annotation(state)
    assert text == '{"since":"2027-01-15T08:00:00Z","suspend_at":"2027-01-15T09:00:00Z"}'
    back = idle_from_annotation(text)
    assert back == IdleState(since=T0, suspend_at=T0 + 3600)
    assert idle_annotation(back) == text  # what a culler tests is what it read
    assert idle_from_annotation("not json") == IdleState()
    assert idle_annotation(IdleState()) == "{}"


def test_a_culler_without_the_servers_gpu_types_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A culler not given the servers' c.Raylab would never suspend their clusters of a
    type it lacks: it says which cluster, which type, and what to do, once per cluster."""
    from raylab.backends.local.backend import LocalBackend
    from raylab.config import Settings
    from raylab.culler.ledger import Meter
    from raylab.culler.ledger_store import LocalLedger
    from raylab.culler.sweep import Culler

    settings = Settings.from_config(state_dir=str(tmp_path))
    meter = Meter(LocalLedger(tmp_path), flush_s=600, retention_s=86400, max_gap_s=900)
    culler = Culler(LocalBackend(tmp_path), settings, clock=lambda: T0, meter=meter)
    info = ClusterInfo(name="alice-exp", owner="alice", backend="local", phase=Phase.READY,
                       spec=ClusterSpec(name="alice-exp", gpus=1, gpu_type="proc", workers=1,
                                        cpus="1", memory="2Gi"), head_ready=True)  # fmt: skip
    with caplog.at_level("WARNING", logger="raylab.culler"):
        reports = [culler.sweep([info]) for _ in range(2)]
    assert [(r.clusters, r.read, r.writes) for r in reports] == [(1, 0, 0), (1, 0, 0)]
    (said,) = [r.getMessage() for r in caplog.records]
    assert "alice-exp is of GPU type 'proc', not one of this culler's (a100, cpu, h100, l4)" in said
    assert "docs/culler.md" in said
