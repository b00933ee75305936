"""`/metrics`, GPU-hours and Keep running from a real Jupyter server, over a real cluster.

One GPU cluster (a100, logical GPUs on this machine) owned by the server's own user, so
that the server's culler meters and watches it. Each test gets a fresh server, the way
a restarted one finds the cluster and the ledger again. Counters are process-wide, so
tests compare before and after.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from tornado.httpclient import HTTPClientError

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.identity import current_user, owner_label
from raylab.model import Phase
from raylab.service import ClusterService
from tests.server.conftest import as_user

NAME = "met1"
USER = current_user()  # the server's user: its culler looks after this user's clusters


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {
        "cull_interval_seconds": 0.5,
        "usage_flush_seconds": 1.0,
        "max_gpus_per_user": 4,
        "admin_users": ["admin"],
    }


@pytest.fixture(scope="module")
def gpu_cluster() -> Iterator[str]:
    settings = Settings.from_config()
    svc = ClusterService(LocalBackend(settings.local_state_dir()), settings, USER)
    try:
        svc.create({"name": NAME, "gpus": 2, "gpu_type": "a100", "workers": 1, "cpus": "1",
                    "memory": "2Gi"})  # fmt: skip
        svc.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
        yield NAME
    finally:
        if svc.backend.get(NAME) is not None:
            svc.delete(NAME)
        # Its GPU-hours too: the state folder is the session's, and another module's
        # admin view of everyone's usage must not meet this user's.
        (settings.local_state_dir() / "usage" / f"{owner_label(USER)}.jsonl").unlink(
            missing_ok=True
        )


async def scrape(jp_fetch: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    resp = await jp_fetch("metrics")
    samples = {}
    for family in text_string_to_metric_families(resp.body.decode()):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def value(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


async def until(what: str, probe: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await probe()
        if found:
            return found
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.25)


async def start(jp_serverapp: Any) -> None:
    # A real server starts its extensions' background work once its loop runs;
    # pytest-jupyter never runs that step, so the test does.
    await jp_serverapp._post_start()


async def usage(jp_fetch: Any, user: str = USER, **params: str) -> Any:
    resp = await jp_fetch("raylab", "usage", headers=as_user(user), params=params)
    return json.loads(resp.body)


async def test_metrics_match_the_clusters(
    jp_fetch: Any, jp_serverapp: Any, gpu_cluster: str
) -> None:
    await start(jp_serverapp)
    before = await scrape(jp_fetch)

    async def metered() -> Any:
        samples = await scrape(jp_fetch)
        gained = value(samples, "raylab_gpu_seconds_total", user=USER, gpu_type="a100") - value(
            before, "raylab_gpu_seconds_total", user=USER, gpu_type="a100"
        )
        idle = value(samples, "raylab_idle_clusters", gpu_type="a100")
        return samples if gained > 0 and idle == 1 else None

    samples = await until("the culler meters the cluster and sees it idle", metered)
    assert value(samples, "raylab_clusters", phase="Ready", gpu_type="a100") == 1
    assert value(samples, "raylab_clusters", phase="Suspended", gpu_type="a100") == 0
    assert value(samples, "raylab_gpus_requested", user=USER, gpu_type="a100") == 2
    assert value(samples, "raylab_activity_unknown_clusters", gpu_type="a100") == 0
    assert value(samples, "raylab_cluster_idle_seconds", cluster=NAME, user=USER,
                 gpu_type="a100") >= 0  # fmt: skip
    assert ("raylab_cluster_idle_seconds", (("cluster", NAME), ("gpu_type", "a100"),
            ("user", USER))) in samples  # fmt: skip
    assert value(samples, "raylab_watch_events_total", type="ADDED") >= 1
    assert value(samples, "raylab_dashboard_requests_total", outcome="ok") > value(
        before, "raylab_dashboard_requests_total", outcome="ok"
    )
    # Every counter name ends in _total, and only counters do.
    names = {name for name, _ in samples}
    assert {n for n in names if n.startswith("raylab_") and n.endswith("_total")} >= {
        "raylab_gpu_seconds_total",
        "raylab_watch_events_total",
        "raylab_dashboard_requests_total",
    }

    # The card shows the idle state the culler stored on the cluster.
    listed = json.loads((await jp_fetch("raylab", "clusters", headers=as_user(USER))).body)
    card = next(c for c in listed["clusters"] if c["name"] == NAME)
    assert card["idle"]["since"] is not None
    assert card["uid"].startswith("local-")

    # Keep running (the card's button) empties it and is counted; an error is counted.
    kept = value(samples, "raylab_keep_running_total")
    resp = await jp_fetch("raylab", "clusters", NAME, "keep-running", method="POST", body="{}",
                          headers=as_user(USER))  # fmt: skip
    assert json.loads(resp.body)["cluster"]["idle"]["since"] is None
    with pytest.raises(HTTPClientError):
        await jp_fetch("raylab", "clusters", NAME, "keep-running", method="POST", body="{}",
                       headers=as_user("bob"))  # fmt: skip
    after = await scrape(jp_fetch)
    assert value(after, "raylab_keep_running_total") == kept + 1
    assert value(after, "raylab_api_errors_total", source="rest", status="404") >= 1 + value(
        samples, "raylab_api_errors_total", source="rest", status="404"
    )

    mine = await until("GPU-hours are written", lambda: _hours(jp_fetch))
    assert mine["users"][0]["owner"] == USER
    assert mine["users"][0]["gpu_type"] == "a100"
    assert mine["clusters"][card["uid"]] == pytest.approx(mine["gpu_hours"])


async def _hours(jp_fetch: Any) -> Any:
    body = await usage(jp_fetch)
    return body if body["gpu_hours"] > 0 else None


async def test_gpu_hours_survive_a_server_restart_and_stay_private(
    jp_fetch: Any, jp_serverapp: Any, gpu_cluster: str
) -> None:
    # A fresh server: the ledger on disk has what the last one recorded, and grows.
    first = (await usage(jp_fetch))["gpu_hours"]
    assert first > 0
    await start(jp_serverapp)
    await until("the new server adds to it", lambda: _more(jp_fetch, first))
    assert (await usage(jp_fetch, "bob"))["users"] == []  # bob used nothing
    assert (await usage(jp_fetch, "bob", all="1"))["users"] == []  # and is no admin
    everyone = await usage(jp_fetch, "admin", all="1")
    assert [u["owner"] for u in everyone["users"]] == [USER]


async def _more(jp_fetch: Any, than: float) -> bool:
    return bool((await usage(jp_fetch))["gpu_hours"] > than)
