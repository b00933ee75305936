"""`GET clusters/NAME/gpu-use` (a card being opened) on a real local cluster with FAKE
GPUs: Ray's reporter agent reads them through tests/fake_gpu's libnvidia-ml.so.1.

The server's culler is off, so only the endpoint reads the dashboard: the reading it
answers is the one every sidebar's list shows, a second request within seconds makes no
dashboard request, and other users are told the cluster does not exist.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.server.gpu_use import GpuUseReads
from tests.fake_gpu import FakeGpus
from tests.server.conftest import as_user

OWNER = "alice"
NAME = "gpuopen1"
BUSY = [(87, 61000, 81920), (2, 1000, 81920)]  # one busy GPU, one resting


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {"culler": "off"}


@pytest.fixture
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeGpus]:
    """In this process's environment, which the server here passes to the nodes it
    starts: set before the cluster is made."""
    gpus = FakeGpus(tmp_path_factory.mktemp("fake-gpu"))
    gpus.set("worker-1", BUSY)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in gpus.env().items():
            mp.setenv(key, value)
        yield gpus


async def fetch_json(jp_fetch: Any, *path: str, user: str = OWNER, **kw: Any) -> Any:
    resp = await jp_fetch("raylab", *path, headers=as_user(user), **kw)
    return json.loads(resp.body) if resp.body else None


async def refused(jp_fetch: Any, *path: str, user: str = OWNER) -> tuple[int, Any]:
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", *path, headers=as_user(user))
    body = err.value.response.body if err.value.response else b"{}"
    return err.value.code, json.loads(body)


async def until(what: str, timeout: float, check: Any) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = await check()
        if got is not None:
            return got
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s"
        await asyncio.sleep(1)


async def test_opening_a_card_reads_gpu_use_now(
    jp_fetch: Any, jp_serverapp: Any, fake: FakeGpus, raylab_config: dict[str, Any]
) -> None:
    reads: GpuUseReads = jp_serverapp.web_app.settings["raylab_gpu_use"]
    spec = {"name": NAME, "gpus": 2, "workers": 1, "cpus": "1", "memory": "2Gi"}
    made = await fetch_json(jp_fetch, "clusters", method="POST", body=json.dumps(spec))
    try:
        assert made["cluster"]["owner"] == OWNER

        async def ready() -> Any:
            got = (await fetch_json(jp_fetch, "clusters", NAME))["cluster"]
            return got if got["phase"] == "Ready" and got["head_ready"] else None

        await until("Ready cluster", 600, ready)

        async def measured() -> Any:
            """A reading of the fake's figures, read by this very request: Ray's
            reporter samples on its own period, and a reading is answered again for
            5 s."""
            before = reads.reads
            body = await fetch_json(jp_fetch, "clusters", NAME, "gpu-use")
            assert body["name"] == NAME
            use = body["gpu_use"]
            fresh = reads.reads == before + 1
            return use if fresh and use["state"] == "measured" else None

        use = await until("measured GPU use", 90, measured)
        assert (use["busy"], use["count"], use["utilization"]) == (1, 2, 44.5)
        assert use["history"][-1] == [round(use["at"], 3), 44.5]

        # Every sidebar's list (and its event stream) shows that reading.
        listed = await fetch_json(jp_fetch, "clusters")
        assert [c["name"] for c in listed["clusters"]] == [NAME]
        assert listed["clusters"][0]["gpu_use"] == use

        # Opened again at once (another tab): the same reading, no dashboard request,
        # even though the GPUs changed meanwhile.
        fake.set("worker-1", [(10, 1000, 81920), (10, 1000, 81920)])
        count = reads.reads
        again = await fetch_json(jp_fetch, "clusters", NAME, "gpu-use")
        assert again["gpu_use"] == use
        assert reads.reads == count

        # Another user: no such cluster, as for every per-cluster route. An admin may.
        code, err = await refused(jp_fetch, "clusters", NAME, "gpu-use", user="bob")
        assert (code, err["error"]) == (404, f"no cluster named {NAME!r}")
        admins = await fetch_json(jp_fetch, "clusters", NAME, "gpu-use", user="admin")
        assert admins["gpu_use"]["state"] == "measured"
        # And no such route for a cluster in another namespace.
        code, _ = await refused(jp_fetch, "namespaces", "ns", "clusters", NAME, "gpu-use")
        assert code == 404

        deleted = await jp_fetch("raylab", "clusters", NAME, method="DELETE",
                                 headers=as_user(OWNER))  # fmt: skip
        assert deleted.code == 204
    finally:
        backend = LocalBackend(Settings.from_config().local_state_dir())
        if backend.get(NAME) is not None:
            await asyncio.to_thread(backend.delete, NAME)
