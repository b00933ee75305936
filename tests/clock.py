"""A culler's clock that a test moves by hand: an hour of idleness takes no time."""

from __future__ import annotations

import time


class Clock:
    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
