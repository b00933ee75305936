"""Keeps one standby per GPU type the admin names for a user, while their server runs.

One is made when the server starts and again after each claim. A standby that stopped
or runs other versions is replaced; one that reached its end unclaimed, or that someone
deleted, is not (until the server starts again): a standby nobody claims costs GPU-hours
for nothing.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from ..errors import RaylabError
from ..model import ClusterInfo
from ..service import ClusterService
from ..spec import ClusterSpec, generate_name
from ..standby.claims import retire_standbys
from ..standby.shapes import machine_refuses, same_shape, standby_specs, unusable

log = logging.getLogger(__name__)


@dataclass
class _Slot:
    """One GPU type's standby, as this keeper knows it."""

    spec: ClusterSpec
    uid: str | None = None  # the standby it made last
    paused: str | None = None  # why it makes no more (until the server starts again)
    said: set[str] = field(default_factory=set)


class StandbyKeeper:
    def __init__(self, service: ClusterService) -> None:
        self.service = service
        settings = service.settings
        self.ttl_s = settings.options.standby_ttl_minutes * 60
        self.off: str | None = None  # why there are no standbys here
        self.slots: list[_Slot] = []
        if not settings.options.standby:
            self.off = "no standby shapes are configured (c.Raylab.standby)"
            return
        try:
            self.slots = [_Slot(spec) for spec in standby_specs(settings)]
        except RaylabError as exc:
            self.off = exc.message
            log.error("raylab: no standby clusters: %s", exc.message)
            return
        self.off = machine_refuses(settings, service.backend.name)
        if self.off:
            log.info("raylab: no standby clusters: %s", self.off)

    def tick(self) -> list[str]:
        """Make, replace or retire standbys as needed. Returns what it did, a line each.
        It reads the clusters from the backend, not from a watch that may lag behind
        the standby it has just made."""
        if self.off:
            return []
        service = self.service
        mine = service.backend.clusters(owner=service.user)
        done: list[str] = []
        for slot in self.slots:
            try:
                done += self._keep(slot, mine)
            except RaylabError as exc:
                # The backend is away or refuses: said once, tried again next tick.
                if exc.message not in slot.said:
                    slot.said.add(exc.message)
                    log.warning("raylab: standby %s: %s", slot.spec.gpu_type, exc.message)
        return done

    def _keep(self, slot: _Slot, mine: list[ClusterInfo]) -> list[str]:
        done: list[str] = []
        backend = self.service.backend
        if slot.uid is not None:
            made = next((c for c in mine if c.uid == slot.uid), None)
            if made is None:
                slot.paused = "its standby was deleted unclaimed"
            elif made.standby_until is None:
                done.append(f"{made.name} was claimed")
            slot.uid = None
        standbys = [c for c in mine if c.standby_until is not None
                    and same_shape(c.spec, slot.spec)]  # fmt: skip
        alive = []
        now = time.time()
        for info in standbys:
            why = unusable(info, now)
            if why is None:
                alive.append(info)
                continue
            if backend.retire_standby(info.name, namespace=info.namespace):
                done.append(f"deleted standby {info.name}: it {why}")
                if info.standby_until is not None and info.standby_until <= now:
                    slot.paused = "its standby reached its end unclaimed"
        if alive:
            slot.uid = alive[0].uid
            return done
        if slot.paused:
            return done
        spec = ClusterSpec(**{**slot.spec.to_json(), "name": generate_name()})
        made = self.service.create_standby(spec, time.time() + self.ttl_s)
        if made is not None:
            slot.uid = made.uid
            done.append(f"made standby {made.name}")
        return done

    def retire_all(self) -> list[str]:
        """Delete the user's standbys (their server stops)."""
        return retire_standbys(self.service.backend, self.service.user)
