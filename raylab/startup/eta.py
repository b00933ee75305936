"""The phase clock of one wait, and the view that shows it: `Pulling the image — usually
3 min here (1:12 so far)`, and once a phase takes twice its usual time, a line saying so
with the reason the backend gives."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..model import ClusterInfo, duration_text
from .history import PhaseHistory
from .phases import startup_phase

SLOW = 2.0  # a phase this many times its usual time is said to be slow


def so_far_text(seconds: float) -> str:
    s = max(0, int(seconds))
    return f"{s // 60}:{s % 60:02d}"


class PhaseClock:
    """Follows one cluster's phases through a wait and remembers how long each took."""

    def __init__(
        self,
        history: PhaseHistory,
        key: str,
        *,
        record: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`key`: what starts alike (backend and GPU type); `record`: whether this wait
        saw the cluster's start from its beginning (a phase joined half-way is no
        measure of one)."""
        self.history = history
        self.key = key
        self.record = record
        self.clock = clock
        self.phase: str | None = None
        self.since = clock()
        self.info: ClusterInfo | None = None
        self._first = True

    def see(self, info: ClusterInfo) -> None:
        self.info = info
        phase = startup_phase(info)
        if phase == self.phase:
            return
        now = self.clock()
        if self.phase is not None and self.record:
            self.history.record(self.key, self.phase, now - self.since)
        if self.phase is None and self._first:
            now = self.since  # the first phase began when the wait did
        self._first = False
        self.phase, self.since = phase, now

    def usual(self) -> float | None:
        return self.history.usual(self.key, self.phase) if self.phase else None

    def slow(self) -> bool:
        usual = self.usual()
        return usual is not None and usual >= 1.0 and self.clock() - self.since > SLOW * usual

    def headline(self) -> str:
        """The phase and its usual time, without the clock (for lines printed once)."""
        if self.phase is None:
            return ""
        usual = self.usual()
        if self.slow() and usual is not None:
            why = f": {self.info.reason}" if self.info and self.info.reason else ""
            return f"{self.phase} is taking longer than usual ({duration_text(usual)}){why}"
        return f"{self.phase} — usually {duration_text(usual)} here" if usual else self.phase

    def text(self) -> str:
        """The headline with the time so far (for the live card)."""
        head = self.headline()
        return f"{head} ({so_far_text(self.clock() - self.since)} so far)" if head else ""


class EtaView:
    """A WaitView (service.py) in front of another: the phase clock as its note, unless
    something else (connecting, a backend away) has one to show."""

    def __init__(self, view: Any, clock: PhaseClock, *, live: bool) -> None:
        """`live`: the view redraws in place (a card), so the clock may tick in it; a
        terminal's lines get the headline when it changes."""
        self.view = view
        self.clock = clock
        self.live = live
        self._note = ""
        self._said = ""

    def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None:
        if note is not None:
            self._note = note
        if info is not None:
            self.clock.see(info)
        if self._note:
            self.view.update(info, note)
            return
        if self.live:
            self.view.update(info, self.clock.text())
            return
        line = self.clock.headline()
        self.view.update(info, line if line and line != self._said else None)
        self._said = line or self._said

    def stop_clock(self) -> None:
        self.view.stop_clock()
