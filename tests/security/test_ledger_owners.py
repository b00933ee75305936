"""Attack: a user's GPU-hours ledger billing another user's cluster.

Each user's ledger (a file in the state folder here, a ConfigMap on KubeRay) is written by
cullers, but nothing stops its user from writing there too. What bob's ledger says about
alice's cluster must not count: not for alice (intervals naming her as owner), not for
bob (intervals of her live cluster, which says whose it is), and not by merging with her
own intervals of a cluster since deleted. Reading goes through the real usage endpoint
of a Jupyter server; recording through a real culler sweep of the live clusters.

Two real local clusters with one logical GPU each (a head and a worker apiece).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.sweep import Culler
from raylab.identity import owner_label
from raylab.model import ClusterInfo, Phase
from raylab.service import ClusterService
from tests.ledgers import HOUR, interval, ledgers_put_back, write_ledger
from tests.server.conftest import as_user

T0 = time.time() - 3 * HOUR  # well inside the usage endpoint's default 7 days
ALICE, BOB = "gpu-alice", "bob1"  # bob's is swept first (by name), his ledger read first


def service(user: str) -> ClusterService:
    settings = Settings.from_config()
    return ClusterService(LocalBackend(settings.local_state_dir()), settings, user)


@pytest.fixture(scope="module")
def clusters() -> Iterator[dict[str, ClusterInfo]]:
    made: dict[str, ClusterService] = {}
    try:
        for user, name in (("alice", ALICE), ("bob", BOB)):
            made[name] = service(user)
            made[name].create({"name": name, "workers": 1, "gpus": 1, "cpus": "1"})
        yield {
            name: svc.wait(name, lambda i: i.phase == Phase.READY, timeout=600)
            for name, svc in made.items()
        }
    finally:
        for name, svc in made.items():
            if svc.backend.get(name) is not None:
                svc.delete(name)


async def hours(jp_fetch: Any, user: str, everyone: bool = False) -> dict[str, float]:
    params = {"all": "1"} if everyone else {}
    resp = await jp_fetch("raylab", "usage", headers=as_user(user), params=params)
    totals: dict[str, float] = {}
    for row in json.loads(resp.body)["users"]:
        totals[row["owner"]] = totals.get(row["owner"], 0.0) + row["gpu_hours"]
    return {owner: round(total, 3) for owner, total in totals.items()}


async def test_a_ledger_counts_only_its_users_own_clusters(
    jp_fetch: Any, state_dir: Path, clusters: dict[str, ClusterInfo], caplog: Any
) -> None:
    alice, bob = clusters[ALICE], clusters[BOB]
    gone = "local-deleted-of-alice"
    write_ledger(state_dir, "alice", [
        interval(alice, "alice", 1, T0, T0 + HOUR),  # 1 GPU-hour
        interval(gone, "alice", 2, T0, T0 + HOUR / 2),  # 1 GPU-hour
    ])  # fmt: skip
    write_ledger(state_dir, "bob", [
        interval(bob, "bob", 1, T0, T0 + HOUR),  # his own: 1 GPU-hour
        interval(alice, "alice", 1, T0 + HOUR, T0 + 2 * HOUR),  # billed to alice
        interval(alice, "bob", 1, T0, T0 + HOUR),  # her live cluster, claimed
        # Her deleted cluster, which nothing can check: his word, for his own bill, but
        # it must not stretch hers (merged by cluster, it made hers 1.5 hours long).
        interval(gone, "bob", 2, T0 + HOUR / 6, T0 + 1.5 * HOUR),  # 2.667 GPU-hours
    ])  # fmt: skip
    assert await hours(jp_fetch, "admin", everyone=True) == {"alice": 2.0, "bob": 3.667}
    assert await hours(jp_fetch, "alice") == {"alice": 2.0}
    assert await hours(jp_fetch, "bob") == {"bob": 3.667}
    # Ignored, and said once (not at every read) naming the cluster and the ledger.
    said = [r.getMessage() for r in caplog.records if alice.uid in r.getMessage()]
    assert len(said) == 1, said
    assert ALICE in said[0]
    assert "bob" in said[0]


def test_a_sweep_resumes_a_cluster_only_from_its_owners_ledger(
    state_dir: Path, clusters: dict[str, ClusterInfo]
) -> None:
    """A culler that (re)starts continues a cluster's last interval from its ledger: an
    interval in bob's ledger, just ended, must not make alice's cluster billed since."""
    alice, bob = clusters[ALICE], clusters[BOB]
    now = time.time()
    write_ledger(state_dir, "alice", [interval(alice, "alice", 1, T0, T0 + HOUR)])
    write_ledger(state_dir, "bob", [
        interval(bob, "bob", 1, T0, T0 + HOUR),
        interval(alice, "bob", 1, now - 600, now - 60),
        interval(alice, "alice", 1, now - 600, now - 60),
    ])  # fmt: skip
    backend = LocalBackend(state_dir)
    culler = Culler(backend, Settings.from_config(), clock=lambda: now)
    culler.sweep(backend.clusters())
    culler.close()
    lines = (state_dir / "usage" / f"{owner_label('alice')}.jsonl").read_text().splitlines()
    # Only what alice's own ledger had: her cluster was first seen now, billed from now.
    [billed] = [json.loads(line) for line in lines]
    assert billed["uid"] == alice.uid
    assert (billed["start"], billed["end"]) == (pytest.approx(T0), pytest.approx(T0 + HOUR))


@pytest.fixture(autouse=True)
def _warnings(caplog: Any) -> None:
    caplog.set_level(logging.WARNING)


@pytest.fixture(scope="module", autouse=True)
def _ledgers_put_back() -> Iterator[None]:
    with ledgers_put_back(Settings.from_config().local_state_dir(), ("alice", "bob")):
        yield
