"""The status card `%raycluster up/status` shows: live in a notebook, lines in a terminal."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any, cast

from ..errors import RaylabError
from ..model import ClusterInfo
from . import render


def in_notebook() -> bool:
    """True in a kernel with a rich frontend (widgets render), False in terminal IPython."""
    try:
        from IPython import get_ipython

        shell = get_ipython()
    except ImportError:
        return False
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


def card_text(info: ClusterInfo, started: float | None = None) -> str:
    """The card as plain text: what a notebook stores beside the widget, and terminals show."""
    return "\n".join([info.name, *(f"{k}: {v}" for k, v in render.card_fields(info, started))])


class StatusCard:
    """An ipywidgets HTML card updated in place; safe to update from a helper thread.

    Its text/plain form is the card's text, so saved notebooks and viewers without
    widgets still show the status.
    """

    def __init__(self, info: ClusterInfo, started: float | None = None) -> None:
        import ipywidgets
        from IPython.display import display

        class CardHTML(ipywidgets.HTML):  # type: ignore[misc]  # ipywidgets is untyped
            text = ""

            def __repr__(self) -> str:
                return self.text

        self._started = started
        self._note = ""
        self._lock = threading.Lock()
        self._info = info
        self.widget: Any = CardHTML()
        self._render()
        cast(Callable[..., None], display)(self.widget)  # IPython.display is not typed

    def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None:
        with self._lock:
            if info is not None:
                self._info = info
            if note is not None:
                self._note = note
            self._render()

    def _render(self) -> None:
        self.widget.text = card_text(self._info, self._started)
        self.widget.value = render.card_html(self._info, self._started, self._note)

    def follow(
        self, fetch: Callable[[], ClusterInfo], every: float = 2.0, for_s: float = 1800.0
    ) -> None:
        """Keep the card live from a helper thread (the kernel stays free) for a while."""

        def loop() -> None:
            deadline = time.monotonic() + for_s
            while time.monotonic() < deadline:
                time.sleep(every)
                try:
                    self.update(fetch())
                except RaylabError as exc:  # deleted, or the backend went away
                    self.update(note=exc.message)
                    return

        threading.Thread(target=loop, daemon=True, name="raylab-card").start()

    def stop_clock(self) -> None:
        """Freeze 'Elapsed' once the wait is over."""
        self._started = None
        self.update()


class TextProgress:
    """The same progress as lines, printed when the phase or reason changes."""

    def __init__(self, info: ClusterInfo, started: float | None = None) -> None:
        self._last = ""
        self.update(info)

    def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None:
        if info is not None:
            line = render.summary(info)
            if line != self._last:
                self._last = line
                print(line, file=sys.stdout, flush=True)
        if note:
            print(note, flush=True)

    def stop_clock(self) -> None:
        pass


def progress_view(info: ClusterInfo, started: float | None = None) -> StatusCard | TextProgress:
    return StatusCard(info, started) if in_notebook() else TextProgress(info, started)
