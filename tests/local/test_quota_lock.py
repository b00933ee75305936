"""A user's quota check and create are one step across processes: the local backend's
quota lock (a file in the state folder, backends/local/backend.py), which the service
holds while it checks the quota and creates (service.py).

The requests come from real OS processes (multiprocessing, spawn: a fresh interpreter
each, as a kernel, a CLI and the Jupyter server are), each with a service of its own over
the session's state folder; the cluster that wins is a real one (a head alone).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.context import SpawnContext
from pathlib import Path
from typing import Any

import pytest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.errors import RaylabError
from raylab.service import ClusterService

USER = "racer"
LIMITS = {"max_clusters_per_user": 1, "max_gpus_per_user": 1}
HEAD_ALONE = {"workers": 0, "cpus": "1"}  # the cheapest real cluster
ANSWER_TIMEOUT_S = 300.0  # a create starts a head on a busy 2-core machine


@dataclass(frozen=True)
class Answer:
    """What a process's `service.create` came to: "created", or the error's class."""

    outcome: str
    message: str
    detail: str | None
    seconds: float  # from asking to the answer, in that process


def requester(inbox: Any, outbox: Any, lock_timeout_s: float | None) -> None:
    """One process of USER's (a kernel, a CLI): for each request it is given, say it is
    asking, then ask the service, as `%raycluster up` does, and send back the answer.
    `lock_timeout_s`: how long it waits for the quota check (None: the backend's own)."""
    if lock_timeout_s is not None:
        from raylab.backends.local import backend

        backend.QUOTA_LOCK_TIMEOUT_S = lock_timeout_s
    settings = Settings.from_config(**LIMITS)
    service = ClusterService(LocalBackend(settings.local_state_dir()), settings, USER)
    outbox.put("ready")
    while (request := inbox.get()) is not None:
        outbox.put("asking")
        started = time.monotonic()
        try:
            info, _ = service.create(request)
            answer = Answer("created", info.name, None, time.monotonic() - started)
        except RaylabError as exc:
            answer = Answer(type(exc).__name__, exc.message, exc.detail,
                            time.monotonic() - started)  # fmt: skip
        outbox.put(answer)


class Requester:
    """A running `requester` process and its two queues."""

    def __init__(self, ctx: SpawnContext, lock_timeout_s: float | None = None) -> None:
        self.inbox, self.outbox = ctx.Queue(), ctx.Queue()
        self.process = ctx.Process(target=requester, daemon=True,
                                   args=(self.inbox, self.outbox, lock_timeout_s))  # fmt: skip
        self.process.start()

    def next(self) -> Any:
        return self.outbox.get(timeout=ANSWER_TIMEOUT_S)

    def ask(self, request: dict[str, Any]) -> None:
        self.inbox.put(request)
        assert self.next() == "asking"

    def stop(self) -> None:
        self.inbox.put(None)
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()


@pytest.fixture
def ctx() -> SpawnContext:
    return multiprocessing.get_context("spawn")


@pytest.fixture
def backend(state_dir: Path) -> Iterator[LocalBackend]:
    """The state folder every process shares; USER's clusters are deleted afterwards."""
    local = LocalBackend(state_dir)
    assert local.clusters(owner=USER) == []
    yield local
    for info in local.clusters(owner=USER):
        local.delete(info.name)


def test_two_processes_racing_for_the_last_cluster_one_gets_it(
    ctx: SpawnContext, backend: LocalBackend
) -> None:
    """Both are past their imports and ask at once; without the lock both would find no
    cluster and both create one."""
    racers = [Requester(ctx), Requester(ctx)]
    try:
        assert [r.next() for r in racers] == ["ready", "ready"]
        for racer, name in zip(racers, ("race-a", "race-b"), strict=True):
            racer.inbox.put({"name": name, **HEAD_ALONE})
        assert [r.next() for r in racers] == ["asking", "asking"]
        answers = sorted((r.next() for r in racers), key=lambda a: a.outcome != "created")
    finally:
        for racer in racers:
            racer.stop()
    won, refused = answers
    assert won.outcome == "created", answers
    assert refused.outcome == "QuotaExceeded", answers
    assert refused.message == "you have 1 clusters, the limit is 1"
    assert refused.detail == "delete one with `raylab down NAME`"
    # What every process now reads: the winner's cluster, and no other.
    assert [c.name for c in backend.clusters(owner=USER)] == [won.message]


def test_a_request_finds_the_quota_check_held_by_another_process(
    ctx: SpawnContext, backend: LocalBackend
) -> None:
    """While another process holds USER's quota lock (as its service does while it
    creates), a request waits for it; one that waits longer than the backend allows is
    refused as BackendUnavailable (base.py's protocol) with nothing made, and one asked
    once the lock is free gets its quota checked."""
    patient = Requester(ctx, lock_timeout_s=2.0)
    try:
        assert patient.next() == "ready"
        with backend.quota_lock(USER):  # this process: another of USER's, mid-create
            patient.ask({"name": "held-out", **HEAD_ALONE})
            answer = patient.next()
            assert answer.outcome == "BackendUnavailable", answer
            assert answer.message == (
                f"another request of {USER}'s held the quota check for over 2 s"
            )
            assert answer.detail == "try again in a moment"
            assert answer.seconds >= 2.0  # it waited as long as it was allowed
            assert backend.clusters(owner=USER) == []
            assert not (backend.state_dir / "held-out").exists()
        # Free now: the same process's next request gets to the check the lock guards
        # (too many GPUs: refused by the quota, so nothing is started).
        patient.ask({"name": "too-big", "gpus": 2, "workers": 1, "cpus": "1"})
        answer = patient.next()
    finally:
        patient.stop()
    assert answer.outcome == "QuotaExceeded", answer
    assert answer.message == "2 GPUs requested, quota is 1 and 0 are in use"
    assert backend.clusters(owner=USER) == []
