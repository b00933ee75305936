"""Notices when the head of the cluster this kernel drives goes away.

A direct driver whose GCS is gone waits forever in `ray.get` and, 60 seconds later, Ray
ends the whole process ("Failed to connect to GCS within 60 seconds… The program will
terminate"): a notebook kernel would die with every variable in it. So a driver's kernel
gets a long reconnect timeout (connect.py sets RAY_gcs_rpc_server_reconnect_timeout_s)
and this watch instead: a thread asks the GCS every few seconds; when it has not answered
for LOST_AFTER_S, it records the loss and, when the main thread waits inside Ray,
interrupts it, which frees a waiting `ray.get` (a cell busy with anything else goes on).
The magics then say so in one line and disconnect, in the main thread (a Ray shutdown
from another thread while the main one waits in Ray ends the process).
"""

from __future__ import annotations

import _thread
import logging
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

PROBE_EVERY_S = 2.0
LOST_AFTER_S = 8.0

_log = logging.getLogger("raylab")


@dataclass(frozen=True)
class Lost:
    cluster: str
    address: str
    since: float  # when the GCS last answered
    interrupted: bool = False  # the main thread was waiting in Ray and was interrupted

    def message(self, prog: str = "%raycluster") -> str:
        when = time.strftime("%H:%M:%S", time.localtime(self.since))
        stopped = " and the cell waiting on it was stopped" if self.interrupted else ""
        return (
            f"Lost cluster {self.cluster}: its head ({self.address}) has not answered since "
            f"{when}, so this kernel is disconnected from it{stopped}. Your variables are "
            f"kept; the cluster's objects and actors are gone. `{prog} status "
            f"{self.cluster}` says why; `{prog} connect {self.cluster}` once it is back."
        )


class Watch:
    def __init__(self, cluster: str, address: str, probe: Callable[[], None]) -> None:
        self.cluster, self.address = cluster, address
        self._probe = probe  # raises when the GCS does not answer in time
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="raylab-driver-watch",
                                        daemon=True)  # fmt: skip

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        # Silence is timed on the monotonic clock: a step of the wall clock (NTP, a
        # resumed VM) must not read as a head that stopped answering.
        answered, answered_at = time.time(), time.monotonic()
        while not self._stop.wait(PROBE_EVERY_S):
            try:
                self._probe()
                answered, answered_at = time.time(), time.monotonic()
                continue
            except Exception as exc:  # any failure to answer counts the same
                _log.debug("GCS probe of %s failed: %s", self.cluster, exc)
            if time.monotonic() - answered_at >= LOST_AFTER_S and not self._stop.is_set():
                _lose(Lost(self.cluster, self.address, answered))
                return


_lost: Lost | None = None
_lost_lock = threading.Lock()


def _lose(lost: Lost) -> None:
    global _lost
    lost = replace(lost, interrupted=_main_waits_in_ray())
    with _lost_lock:
        _lost = lost
    _log.info("%s", lost.message())
    if lost.interrupted:
        _thread.interrupt_main()  # a KeyboardInterrupt where the cell waits


def _main_waits_in_ray() -> bool:
    frame = sys._current_frames().get(threading.main_thread().ident or 0)
    while frame is not None:
        if "/ray/" in frame.f_code.co_filename.replace("\\", "/"):
            return True
        frame = frame.f_back
    return False


def lost_pending() -> str | None:
    """The cluster whose loss is recorded and not yet reported (None: none)."""
    with _lost_lock:
        return _lost.cluster if _lost is not None else None


def take_lost() -> Lost | None:
    """The loss not yet reported (then forgotten: it is reported once)."""
    global _lost
    with _lost_lock:
        lost, _lost = _lost, None
    return lost
