"""The server extension's standby keeper: its user's standbys on a timer, off the event
loop (raylab/standby); their deletion when the server stops."""

from __future__ import annotations

import asyncio
import logging

from tornado.ioloop import PeriodicCallback

from ..backends.base import Backend
from ..config import Settings
from ..identity import current_user
from ..service import ClusterService
from .standby_keeper import StandbyKeeper

TICK_S = 5.0  # how soon after a claim the next standby starts


class ServerStandby:
    def __init__(self, backend: Backend, settings: Settings, log: logging.Logger) -> None:
        self.log = log
        self.keeper = StandbyKeeper(ClusterService(backend, settings, current_user()))
        self._timer = PeriodicCallback(self._tick, TICK_S * 1000)
        self._running = False

    @property
    def off(self) -> str | None:
        return self.keeper.off

    def start(self) -> None:
        self._timer.start()
        asyncio.get_running_loop().create_task(self._tick())  # the first one at once

    async def stop(self) -> None:
        self._timer.stop()
        gone = await asyncio.get_running_loop().run_in_executor(None, self.keeper.retire_all)
        if gone:
            self.log.info("raylab: deleted standby clusters %s (the server stops)", ", ".join(gone))

    async def _tick(self) -> None:
        if self._running:
            return  # a slow start of a standby is not stacked on
        self._running = True
        try:
            loop = asyncio.get_running_loop()
            for line in await loop.run_in_executor(None, self.keeper.tick):
                self.log.info("raylab: %s", line)
        except Exception:
            self.log.exception("raylab: keeping the standby cluster failed")
        finally:
            self._running = False
