"""Start-up phases with an ETA (raylab/startup): the phase named from a cluster's status,
its usual time from the last starts here, the live card's clock, the terminal's lines,
and the slow-phase line with the backend's reason. A fake clock drives the waits; the
history is a real file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from raylab.backends.kuberay.status import derive_status
from raylab.config import Settings
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec
from raylab.startup import EtaView, PhaseClock, PhaseHistory, startup_phase

SPEC = ClusterSpec.from_mapping({"gpus": 2, "workers": 2}, Settings.from_config().profiles)
KEY = "kuberay/a100"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def info(phase: Phase, reason: str = "", head_ready: bool = False) -> ClusterInfo:
    return ClusterInfo("c", "ann", "kuberay", phase, SPEC, reason=reason, head_ready=head_ready)


SCHEDULING = info(Phase.PENDING, "the head cannot be scheduled: 0/4 nodes have nvidia.com/gpu")
PULLING = info(Phase.STARTING, "pulling the image of head pod c-head")
STARTING = info(Phase.STARTING, "starting the head")
WORKERS = info(Phase.STARTING, "1/2 workers ready", head_ready=True)
READY = info(Phase.READY, head_ready=True)


def test_each_status_names_its_phase() -> None:
    assert startup_phase(info(Phase.QUEUED, "position 3 in team-a")) == "Waiting in the queue"
    assert startup_phase(SCHEDULING) == "Scheduling"
    assert startup_phase(PULLING) == "Pulling the image"
    assert startup_phase(STARTING) == "Starting Ray"
    assert startup_phase(WORKERS) == "Starting workers"
    assert startup_phase(READY) is None
    assert startup_phase(info(Phase.FAILED, "boom")) is None


def start(history: PhaseHistory, clock: Clock, steps: list[tuple[ClusterInfo, float]]) -> None:
    """One wait that sees each status after the seconds given."""
    phases = PhaseClock(history, KEY, clock=clock)
    for status, seconds in steps:
        clock.now += seconds
        phases.see(status)


def test_a_phase_says_how_long_it_usually_takes_here(tmp_path: Path) -> None:
    history, clock = PhaseHistory(tmp_path / "h.json"), Clock()
    for pull in (170.0, 190.0, 180.0):
        start(history, clock, [(SCHEDULING, 0), (PULLING, 5), (STARTING, pull), (READY, 8)])
    assert history.usual(KEY, "Pulling the image") == 180.0
    assert history.usual(KEY, "Starting Ray") == 8.0

    phases = PhaseClock(history, KEY, clock=clock)
    phases.see(PULLING)
    clock.now += 72
    assert phases.text() == "Pulling the image — usually 3 min here (1:12 so far)"
    assert phases.headline() == "Pulling the image — usually 3 min here"
    # Twice the usual time: it says so, with the reason the backend gives.
    clock.now += 300
    assert phases.slow()
    assert phases.text() == (
        "Pulling the image is taking longer than usual (3 min): pulling the image of head "
        "pod c-head (6:12 so far)"
    )


def test_no_history_yet_says_the_phase_and_the_time(tmp_path: Path) -> None:
    clock = Clock()
    phases = PhaseClock(PhaseHistory(tmp_path / "none.json"), KEY, clock=clock)
    phases.see(SCHEDULING)
    clock.now += 5
    assert phases.text() == "Scheduling (0:05 so far)"
    assert not phases.slow()


def test_a_wait_that_joined_half_way_teaches_nothing(tmp_path: Path) -> None:
    history, clock = PhaseHistory(tmp_path / "h.json"), Clock()
    phases = PhaseClock(history, KEY, record=False, clock=clock)
    for status in (STARTING, WORKERS, READY):
        clock.now += 30
        phases.see(status)
    assert not (tmp_path / "h.json").exists()


def test_a_damaged_history_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "h.json"
    path.write_text('{"kuberay/a100": {"Scheduling": ["x", -1, 1e99, 4]}, "other": 7}')
    history = PhaseHistory(path)
    assert history.usual(KEY, "Scheduling") == 4.0
    path.write_text("not json")
    assert history.usual(KEY, "Scheduling") is None
    history.record(KEY, "Scheduling", 2.0)
    assert history.usual(KEY, "Scheduling") == 2.0


def test_the_history_keeps_the_last_ten(tmp_path: Path) -> None:
    history = PhaseHistory(tmp_path / "h.json")
    for seconds in range(1, 21):
        history.record(KEY, "Starting Ray", float(seconds))
    assert history.usual(KEY, "Starting Ray") == 15.5  # the median of 11..20


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[ClusterInfo | None, str | None]] = []

    def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None:
        self.calls.append((info, note))

    def stop_clock(self) -> None:
        pass


def test_the_card_ticks_and_the_terminal_says_each_phase_once(tmp_path: Path) -> None:
    history, clock = PhaseHistory(tmp_path / "h.json"), Clock()
    start(history, clock, [(STARTING, 0), (READY, 8)])

    card = Recorder()
    live = EtaView(card, PhaseClock(history, KEY, record=False, clock=clock), live=True)
    live.update(STARTING)
    clock.now += 3
    live.update()
    assert [note for _, note in card.calls] == [
        "Starting Ray — usually 8 s here (0:00 so far)",
        "Starting Ray — usually 8 s here (0:03 so far)",
    ]
    live.update(note="Connecting this kernel as a Ray driver…")  # another note wins
    live.update(WORKERS)
    assert card.calls[-1] == (WORKERS, None)

    lines = Recorder()
    text = EtaView(lines, PhaseClock(history, KEY, clock=clock), live=False)
    for status in (STARTING, STARTING, WORKERS, READY):
        clock.now += 1
        text.update(status)
    notes: list[Any] = [note for _, note in lines.calls]
    assert notes == ["Starting Ray — usually 8 s here", None, "Starting workers", None]


def pod(kind: str, *, scheduled: bool, waiting: str | None) -> dict[str, Any]:
    statuses = [{"state": {"waiting": {"reason": waiting}}}] if waiting else []
    return {
        "metadata": {"name": f"c-{kind}", "labels": {"ray.io/node-type": kind}},
        "status": {
            "conditions": [{"type": "PodScheduled", "status": str(scheduled)}],
            "containerStatuses": statuses,
        },
    }


def test_kuberay_names_the_image_pull() -> None:
    obj = {"metadata": {"name": "c"}, "spec": {"workerGroupSpecs": []}, "status": {}}
    pulling = derive_status(obj, [pod("head", scheduled=True, waiting="ContainerCreating")])
    assert (pulling.phase, pulling.reason) == (
        Phase.STARTING,
        "pulling the image of head pod c-head",
    )
    started = derive_status(obj, [pod("head", scheduled=True, waiting=None)])
    assert started.reason == "starting the head"
    assert startup_phase(replace(STARTING, reason=pulling.reason)) == "Pulling the image"
