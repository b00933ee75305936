"""Standby clusters on the local backend (raylab/standby): made by a keeper, claimed by
`up`, replaced when broken, ended at their time, deleted with their server.

Every cluster here is real (`ray start` processes); the shapes are the smallest that
show the rule (a head alone, or one logical GPU on one worker), so that the 2-core
machine starts each in seconds. The machine check (4 cores, 8 GiB free) is lowered to
zero: on this machine a standby would otherwise be off, which one test checks too.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from raylab.backends.local.backend import STATE_FILE, LocalBackend
from raylab.config import Settings
from raylab.display.render import phase_text
from raylab.identity import current_user
from raylab.model import ClusterInfo, Phase
from raylab.server.standby_keeper import StandbyKeeper
from raylab.service import ClusterService
from tests.local.test_magics import run

USER = current_user()  # the CLI's and the server's user too
HEAD_ALONE = {"workers": 0, "cpus": "1"}  # the cpu GPU type's cheapest cluster
ONE_GPU = {"gpus": 1, "workers": 1, "cpus": "1"}  # a100, one logical GPU
START_S = 180.0  # a cluster's start on a busy 2-core machine
ANYWHERE = {"standby_min_cores": 0, "standby_min_free_gib": 0.0}


def settings_with(standby: dict[str, Any], **more: Any) -> Settings:
    return Settings.from_config(standby=standby, **ANYWHERE, **more)


@pytest.fixture
def backend() -> Iterator[LocalBackend]:
    backend = LocalBackend(Settings.from_config().local_state_dir())
    before = {c.name for c in backend.clusters()}
    yield backend
    for info in backend.clusters():
        if info.name not in before:
            backend.delete(info.name)


def service_for(backend: LocalBackend, settings: Settings) -> ClusterService:
    return ClusterService(LocalBackend(backend.state_dir), settings, USER)


def wait_for(what: Callable[[], Any], timeout: float = START_S, why: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout:.0f} s: {why}")


def standbys(backend: LocalBackend) -> list[ClusterInfo]:
    return [c for c in backend.clusters(owner=USER) if c.standby_until is not None]


def ready_standby(backend: LocalBackend) -> ClusterInfo:
    found: ClusterInfo = wait_for(
        lambda: next((c for c in standbys(backend) if c.phase == Phase.READY), None),
        why="a Ready standby",
    )
    return found


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    raylab = str(Path(sys.executable).with_name("raylab"))
    return subprocess.run([raylab, *args], capture_output=True, text=True, timeout=START_S)


def test_up_claims_the_standby_and_the_keeper_makes_the_next(backend: LocalBackend) -> None:
    settings = settings_with({"a100": ONE_GPU}, max_gpus_per_user=2)
    keeper = StandbyKeeper(service_for(backend, settings))
    assert keeper.off is None
    made = keeper.tick()
    assert [line[: len("made standby ray-")] for line in made] == ["made standby ray-"]
    standby = ready_standby(backend)
    # It shows as a standby, and it counts: one cluster, one GPU of the quota.
    assert phase_text(standby).startswith("Ready — standby until ")
    quota = service_for(backend, settings).quota()
    assert (quota.clusters_used, quota.gpus_used) == (1, 1)
    listed = run_cli("list")
    row = next(line for line in listed.stdout.splitlines() if line.startswith(standby.name))
    assert "Ready — standby until" in row, listed.stdout

    # `up` of the same shape, without a name, claims it: Ready at once, now theirs.
    started = time.monotonic()
    up = run_cli("up", "--gpus", "1", "--workers", "1", "--cpus", "1")
    took = time.monotonic() - started
    assert up.returncode == 0, up.stderr
    assert f"Claimed the standby cluster {standby.name} (Ready)." in up.stdout, up.stdout
    claimed = backend.get(standby.name)
    assert claimed is not None
    assert claimed.standby_until is None
    assert claimed.uid == standby.uid
    assert claimed.phase == Phase.READY
    assert took < 15.0, f"`up` from a standby took {took:.1f} s"  # the CLI's imports included

    # The keeper sees the claim and starts the next standby (the quota has room for it).
    done = keeper.tick()
    assert f"{standby.name} was claimed" in done
    assert any(line.startswith("made standby ") for line in done), done
    (fresh,) = standbys(backend)
    assert fresh.name != standby.name
    assert fresh.uid != standby.uid

    # An `up` of another shape does not claim it; where the quota has no room for both,
    # the standby is what gives way, and says so.
    lines: list[str] = []
    other, _ = service_for(backend, settings).create({**ONE_GPU, "cpus": "2"}, say=lines.append)
    assert other.name != fresh.name
    assert lines == [f"Deleted the standby cluster {fresh.name} to make room in your quota."]
    assert backend.get(fresh.name) is None
    # Deleted unclaimed: the keeper makes no other (nor could the quota hold one).
    assert keeper.tick() == []
    assert standbys(backend) == []


def job_workers(cluster: str, idle: bool = False) -> set[int]:
    """Worker processes of a kernel's job on this cluster, from their start: Ray starts
    them through its setup_worker.py, which then runs the worker in the folder it shipped
    (runtime_resources/working_dir_files); a node's workers for no job have neither.
    `idle`: only those up and waiting for a task (Ray titles them ray::IDLE)."""
    import psutil

    from raylab.backends.local.processes import CLUSTER_ENV

    found = set()
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            args = proc.info["cmdline"] or [""]
            setup = len(args) > 1 and args[1].endswith("setup_worker.py")  # python setup_worker.py
            worker = args[0].startswith("ray::") and "working_dir_files" in proc.cwd()
            if idle and (setup or args[0] != "ray::IDLE"):
                continue
            if (setup or worker) and proc.environ().get(CLUSTER_ENV) == cluster:
                found.add(proc.pid)
    return found


def test_a_claimed_standby_s_workers_start_at_once_and_take_the_first_task(
    backend: LocalBackend, shell: InteractiveShell, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    """Claimed, the cluster is Ready at once: the kernel's job workers start at once,
    during the cell that ran `up`, and hold no GPU, so the cell's first GPU task runs in
    one of them. (A task that comes while they still start takes whichever worker
    registers first, theirs or the one Ray starts for it.)"""
    StandbyKeeper(service_for(backend, settings_with({"a100": ONE_GPU}))).tick()
    standby = ready_standby(backend)
    monkeypatch.chdir(tmp_path)  # ship an empty folder
    # Earlier cells import nothing installed: no drift check's task starts a worker.
    monkeypatch.setitem(shell.user_ns, "In", [""])
    shell.user_ns["job_workers"] = job_workers
    cell = (
        "%raycluster up --gpus 1 --workers 1 --cpus 1\n"
        "import os, time, ray\n"
        "deadline = time.monotonic() + 60\n"
        f"while (not (warm := job_workers({standby.name!r}, idle=True))\n"
        "       and time.monotonic() < deadline):\n"
        "    time.sleep(0.2)\n"
        "@ray.remote(num_gpus=1)\n"
        "def where():\n"
        "    return os.getpid()\n"
        "first = ray.get(where.remote())\n"
    )
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            shell.run_cell(cell).raise_error()
        assert f"Claimed the standby cluster {standby.name} (Ready)." in out.getvalue(), out
        warm = shell.user_ns["warm"]
        assert len(warm) == 1, warm  # the worker's one CPU: one process
        assert shell.user_ns["first"] in warm
    finally:
        with contextlib.suppress(UsageError):
            run(shell, f"down {standby.name}")


def test_two_racing_ups_one_claims_the_other_starts_cold(backend: LocalBackend) -> None:
    settings = settings_with({"cpu": HEAD_ALONE})
    StandbyKeeper(service_for(backend, settings)).tick()
    standby = ready_standby(backend)
    results: list[tuple[str, bool]] = []
    lines: list[str] = []
    gate = threading.Barrier(2)

    def up() -> None:
        service = service_for(backend, settings)  # a backend and locks of its own
        gate.wait()
        info, created = service.create(dict(HEAD_ALONE), say=lines.append)
        results.append((info.name, created))

    threads = [threading.Thread(target=up) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(START_S)
    names = sorted(name for name, _ in results)
    assert len(results) == 2
    assert all(created for _, created in results)
    assert names.count(standby.name) == 1, names
    assert lines == [f"Claimed the standby cluster {standby.name} (Ready)."]
    assert standbys(backend) == []


def test_a_broken_standby_is_never_claimed_and_is_replaced(backend: LocalBackend) -> None:
    settings = settings_with({"cpu": HEAD_ALONE})
    keeper = StandbyKeeper(service_for(backend, settings))
    keeper.tick()
    dead = ready_standby(backend)
    head = json.loads((backend.state_dir / dead.name / STATE_FILE).read_text())["nodes"][0]
    os.killpg(head["pid"], signal.SIGKILL)  # its head dies (the OOM killer, say)
    wait_for(lambda: (c := backend.get(dead.name)) and c.phase == Phase.FAILED, 30, "Failed")

    lines: list[str] = []
    info, created = service_for(backend, settings).create(dict(HEAD_ALONE), say=lines.append)
    assert created
    assert info.name != dead.name
    assert len(lines) == 1
    assert lines[0].startswith(f"The standby cluster {dead.name} is Failed: head process exited")
    assert lines[0].endswith("; starting a new cluster instead.")

    # The keeper replaces it; one of other versions (made before an upgrade) likewise.
    done = keeper.tick()
    assert done[0].startswith(f"deleted standby {dead.name}: it is Failed"), done
    assert done[1].startswith("made standby "), done
    assert backend.get(dead.name) is None
    older = ready_standby(backend)
    path = backend.state_dir / older.name / STATE_FILE
    state = json.loads(path.read_text())
    path.write_text(json.dumps({**state, "ray_version": "2.0.0"}))
    lines.clear()
    again, _ = service_for(backend, settings).create(dict(HEAD_ALONE), say=lines.append)
    assert again.name != older.name
    assert lines == [
        f"The standby cluster {older.name} runs Ray 2.0.0, this kernel Ray "
        f"{ray_version()}; starting a new cluster instead."
    ]


def test_a_standby_ends_at_its_time_unless_claimed(backend: LocalBackend) -> None:
    """Its own small process deletes it at its end, with no server or keeper running;
    a claimed one it leaves alone, and then exits."""
    settings = settings_with({"cpu": HEAD_ALONE})
    service = service_for(backend, settings)
    spec = StandbyKeeper(service).slots[0].spec
    ending = service.create_standby(spec, time.time() + 4)
    kept = service.create_standby(
        type(spec)(**{**spec.to_json(), "name": spec.name + "k"}), time.time() + 4
    )
    assert ending is not None
    assert kept is not None
    assert backend.claim(kept.name, None) is not None
    wait_for(lambda: backend.get(ending.name) is None, 60, "the unclaimed standby deleted")
    time.sleep(2)
    after = backend.get(kept.name)
    assert after is not None
    assert after.standby_until is None
    assert not reapers(backend.state_dir), "a reaper outlived its standby"


def test_the_server_makes_the_standby_and_deletes_it_when_it_stops(
    backend: LocalBackend, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"Raylab": {"standby": {"cpu": HEAD_ALONE}, **ANYWHERE}})
    )
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(config))
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--port=0",
         f"--ServerApp.root_dir={tmp_path}", "--ServerApp.token=t", "--allow-root"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        standby = ready_standby(backend)
        assert standby.owner == USER
    finally:
        server.terminate()  # as a hub stops it: the server stops its extensions
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
    assert standbys(backend) == [], (tmp_path / "server.log").read_text()[-2000:]
    assert "deleted standby clusters" in (tmp_path / "server.log").read_text()


def test_no_standby_on_a_machine_too_small(backend: LocalBackend) -> None:
    settings = Settings.from_config(standby={"cpu": HEAD_ALONE}, standby_min_cores=10**6)
    keeper = StandbyKeeper(service_for(backend, settings))
    assert keeper.off is not None
    assert "standby_min_cores (1000000)" in keeper.off
    assert keeper.tick() == []
    assert standbys(backend) == []


def ray_version() -> str:
    from importlib.metadata import version

    return version("ray")


def reapers(state_dir: Path) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "raylab.backends.local.standby_reaper" in cmd and str(state_dir) in cmd:
            found.append(proc.pid)
    return found
