"""The server extension's own culler: its user's clusters, on a timer, from the cache.

On by default (`c.Raylab.culler = "server"`), so that a laptop or a hub without a
`raylab culler` service still suspends idle clusters while the server runs. It reads the
clusters from the server's watch cache (no listing), sweeps off the event loop, and
refreshes the cache for what it changed so open sidebars see a warning at once.
"""

from __future__ import annotations

import asyncio
import logging

from tornado.ioloop import PeriodicCallback

from ..config import Settings
from ..culler.sweep import Culler
from ..identity import current_user
from .cache import ClusterCache


class ServerCuller:
    def __init__(self, cache: ClusterCache, settings: Settings, log: logging.Logger) -> None:
        self.cache = cache
        self.log = log
        self.culler = Culler(cache.backend, settings, owner=current_user())
        interval_ms = max(1.0, settings.options.cull_interval_seconds) * 1000
        self._timer = PeriodicCallback(self._tick, interval_ms)
        self._running = False

    def start(self) -> None:
        self._timer.start()

    async def stop(self) -> None:
        self._timer.stop()
        await asyncio.get_running_loop().run_in_executor(None, self.culler.close)

    async def _tick(self) -> None:
        if self._running or not self.cache.synced.is_set():
            return  # a slow sweep is not stacked on; the cache must know the clusters
        self._running = True
        try:
            loop = asyncio.get_running_loop()
            clusters = list(self.cache.clusters.values())
            report = await loop.run_in_executor(None, self.culler.sweep, clusters)
            self.cache.set_gpu_use(self.culler.gpu_use)
            for name in {*report.warned, *report.suspended}:
                await loop.run_in_executor(None, self.cache.refresh, name)
            if report.suspended:
                self.log.info("raylab: suspended idle clusters %s", ", ".join(report.suspended))
        except Exception:
            self.log.exception("raylab: the idle sweep failed")
        finally:
            self._running = False
