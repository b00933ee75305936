"""Attacks on the local backend's state: racing the quota, damaged and foreign state
files, and the folder that holds Ray's sockets and logs.

- Six `POST clusters` at once against a quota of one cluster all answered 201 (the
  check and the create were two steps).
- One malformed `cluster.json` made every later `POST clusters` a 500 for everyone.
- A `cluster.json` names pids and paths: one written by another OS user (a shared state
  folder), or edited, made `down` signal whatever process it named and delete whatever
  folder it named.
- The folder above Ray's world-writable session folders was 0755, and used whoever
  owned it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from raylab.backends.local.backend import STATE_FILE, LocalBackend
from raylab.backends.local.node import started
from raylab.backends.local.tempdir import private_temp_root
from raylab.config import Settings
from raylab.errors import BackendUnavailable, NotFound
from raylab.service import ClusterService
from tests.server.conftest import as_user

SMALL = {"workers": 0, "cpus": "1"}  # a head alone: the cheapest real cluster


@pytest.fixture
def raylab_config() -> dict[str, Any]:
    return {"max_clusters_per_user": 1}


async def post(jp_fetch: Any, body: dict[str, Any], user: str = "alice") -> tuple[int, Any]:
    try:
        resp = await jp_fetch("raylab", "clusters", method="POST", body=json.dumps(body),
                              headers=as_user(user))  # fmt: skip
    except HTTPClientError as err:
        return err.code, json.loads(err.response.body if err.response else b"{}")
    return resp.code, json.loads(resp.body)


def down_all(state_dir: Path, user: str = "alice") -> None:
    settings = Settings.from_config()
    svc = ClusterService(LocalBackend(state_dir), settings, user)
    for info in svc.list():
        svc.delete(info.name)


async def test_concurrent_creates_cannot_pass_the_quota(jp_fetch: Any, state_dir: Path) -> None:
    try:
        answers = await asyncio.gather(
            *(post(jp_fetch, {"name": f"race{i}", **SMALL}) for i in range(6))
        )
        codes = sorted(code for code, _ in answers)
        assert codes == [201, 403, 403, 403, 403, 403], answers
        refusals = {body["error"] for code, body in answers if code == 403}
        assert refusals == {"you have 1 clusters, the limit is 1"}
        assert len(list(state_dir.glob("race*/cluster.json"))) == 1
        # Its Ray temp dirs are under a folder only this user can enter.
        root = Path(tempfile.gettempdir()) / f"raylab-{os.getuid()}"
        assert stat.S_IMODE(root.stat().st_mode) == 0o700
    finally:
        down_all(state_dir)


DAMAGED = {
    "notjson": "{this is not json",
    "alist": "[1, 2, 3]",
    "wrongtypes": json.dumps(
        {
            "spec": {
                "name": "wrongtypes",
                "gpus": "2",
                "gpu_type": "a100",
                "workers": 1,
                "cpus": "1",
                "memory": "1Gi",
            }
        }
    ),
    "deep": "[" * 100_000 + "]" * 100_000,
    "othername": None,  # a well-formed state, of another cluster's name: filled in below
}


async def test_a_damaged_state_file_is_skipped_and_breaks_nothing(
    jp_fetch: Any, state_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for name, text in DAMAGED.items():
        (state_dir / name).mkdir(parents=True)
        (state_dir / name / STATE_FILE).write_text(text or "")
    try:
        code, body = await post(jp_fetch, {"name": "fine", **SMALL})
        assert code == 201, body
        # The good one made, the damaged ones warned about by name and counted nowhere.
        othername = {**json.loads((state_dir / "fine" / STATE_FILE).read_text())}
        (state_dir / "othername" / STATE_FILE).write_text(json.dumps(othername))
        listed = json.loads((await jp_fetch("raylab", "clusters", headers=as_user("alice"))).body)
        assert [c["name"] for c in listed["clusters"]] == ["fine"]
        for name in DAMAGED:
            assert any(f"skipping {state_dir / name / STATE_FILE}" in r.message
                       for r in caplog.records), name  # fmt: skip
        # A damaged file's name is not taken over (its folder may be someone's cluster).
        code, body = await post(jp_fetch, {"name": "notjson", **SMALL}, user="bob")
        assert code == 409, body
        assert body["error"] == "the name 'notjson' is held by a state file raylab cannot use"
        assert (state_dir / "notjson" / STATE_FILE).read_text() == DAMAGED["notjson"]
    finally:
        down_all(state_dir)
        for name in DAMAGED:
            shutil.rmtree(state_dir / name)


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """Any process of this user that is not a Ray node: what a forged pid would name."""
    proc = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
def precious(tmp_path: Path) -> Path:
    """Someone's data, which a forged temp dir would name."""
    folder = tmp_path / "precious"
    folder.mkdir()
    return folder


def forged_state(folder: Path, victim: subprocess.Popen[bytes], precious: Path) -> Path:
    """A cluster.json naming `victim`'s pid and a temp dir that is someone's data."""
    folder.mkdir(parents=True)
    state = {
        "spec": {"name": folder.name, "gpus": 0, "gpu_type": "cpu", "workers": 0,
                 "cpus": "1", "memory": "1Gi"},
        "owner": "alice", "created": time.time(), "ray_version": "2.60.0",
        "python_version": "3.11", "ports": {"gcs": 1, "client": 2, "dashboard": 3},
        "nodes": [{"role": "head", "index": 0, "pid": victim.pid,
                   "started": started(victim.pid),
                   "log": "/etc/hostname", "temp_dir": str(precious)}],
    }  # fmt: skip
    path = folder / STATE_FILE
    path.write_text(json.dumps(state))
    return path


def test_a_state_file_of_another_os_user_is_never_trusted(
    tmp_path: Path, victim: subprocess.Popen[bytes], precious: Path
) -> None:
    backend = LocalBackend(tmp_path / "shared-state")
    alice = ClusterService(backend, Settings.from_config(), "alice")
    path = forged_state(tmp_path / "shared-state" / "planted", victim, precious)
    os.chown(path, 4242, 4242)  # written by another user of a shared folder
    assert alice.list() == []
    with pytest.raises(NotFound):
        alice.delete("planted")
    assert victim.poll() is None
    assert precious.is_dir()


def test_down_signals_only_the_clusters_own_ray_processes(
    tmp_path: Path, victim: subprocess.Popen[bytes], precious: Path
) -> None:
    """The file is the user's own (stale, or edited): its pid and temp dir are claims
    that the process and the private temp root must confirm."""
    backend = LocalBackend(tmp_path / "state")
    alice = ClusterService(backend, Settings.from_config(), "alice")
    forged_state(tmp_path / "state" / "edited", victim, precious)
    assert [c.name for c in alice.list()] == ["edited"]
    assert "hostname" not in alice.logs("edited")  # its log path leads outside
    alice.delete("edited")
    assert alice.list() == []
    assert victim.poll() is None  # still running: not a Ray node of "edited"
    assert precious.is_dir()


@pytest.fixture
def temp_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"raylab-{os.getuid()}"


def test_the_ray_temp_folder_is_made_private(temp_root: Path) -> None:
    assert private_temp_root() == temp_root
    assert stat.S_IMODE(temp_root.stat().st_mode) == 0o700
    temp_root.chmod(0o755)  # as an older raylab left it
    private_temp_root()
    assert stat.S_IMODE(temp_root.stat().st_mode) == 0o700


def test_a_temp_folder_someone_else_made_first_is_refused(temp_root: Path) -> None:
    temp_root.mkdir(mode=0o777)
    os.chown(temp_root, 4242, 4242)
    with pytest.raises(BackendUnavailable) as err:
        private_temp_root()
    assert err.value.message == (
        f"Ray's temp folder {temp_root} belongs to uid 4242, not to you (uid {os.getuid()}): "
        "raylab will not start Ray there"
    )
    temp_root.rmdir()
    temp_root.symlink_to(temp_root.parent)
    with pytest.raises(BackendUnavailable, match="is a link or a file, not a folder of yours"):
        private_temp_root()
