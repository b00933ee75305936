"""On the local backend the kernel is a real Ray driver: what Ray Client cannot do works.

Through Ray Client, `ray.data` failed outright (its executor needs a core worker) and
every call cost 2 to 40 times a driver's. One cluster (2 workers, a logical GPU each) in a real
IPython shell, as a notebook would use it: Ray Data, large objects, actors, Tune, a
Train run with a checkpoint, a module written and edited after `up`, then disconnect and
connect again.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from raylab.kernel.connect import DRIVER, connected_address, connected_cluster, connected_mode
from tests.local.test_magics import run

NAME = "driver1"


@pytest.fixture(scope="module")
def up(shell: InteractiveShell, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("notebook"))  # ship an empty folder
        try:
            yield run(shell, f"up --name {NAME} --gpus 2 --workers 2 --cpus 1 --memory 1Gi")
        finally:
            with contextlib.suppress(UsageError):
                run(shell, f"down {NAME}")


def test_up_connects_as_a_driver_and_says_so(up: str) -> None:
    assert connected_cluster() == NAME
    assert connected_mode() == DRIVER
    address = connected_address()
    assert address is not None
    assert address.startswith("127.0.0.1:")
    assert f"Connected this kernel to {NAME} as a Ray driver ({address}, " in up, up
    import ray

    assert ray.is_initialized()
    assert ray.cluster_resources().get("GPU") == 2.0


def cluster_processes(cluster: str) -> list[tuple[int, str, dict[str, str]]]:
    """This cluster's live processes: (PID, the first word of its command line, its
    environment)."""
    import psutil

    from raylab.backends.local.processes import CLUSTER_ENV

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        with contextlib.suppress(psutil.Error):
            env = proc.environ()
            if env.get(CLUSTER_ENV) == cluster:
                found.append((proc.pid, (proc.info["cmdline"] or [""])[0], env))
    return found


def idle_workers(cluster: str) -> set[int]:
    """This cluster's worker processes that wait for a task (Ray titles them ray::IDLE)."""
    return {pid for pid, command, _ in cluster_processes(cluster) if command == "ray::IDLE"}


def test_workers_are_started_before_the_first_task(up: str) -> None:
    """Once connected, each worker's CPUs get a process of this kernel's job (one CPU
    each here): the first tasks run in them instead of waiting for Python and Ray to
    start."""
    import ray

    deadline = time.monotonic() + 90
    while len(warm := idle_workers(NAME)) < 2 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(warm) == 2, warm

    @ray.remote(num_gpus=1)
    def pid() -> int:
        time.sleep(0.5)  # both at once: one on each worker
        return os.getpid()

    assert set(ray.get([pid.remote(), pid.remote()])) == warm


def test_the_warm_up_gives_way_to_the_users_own_work(up: str) -> None:
    """The warm-up stops once the kernel has started work of its own (a task, a put):
    Ray starts that work's workers itself, and a prestart beside them started a second
    process per node on the same cores. raylab's own calls (the drift check's task at the
    end of `up`) are not the user's work."""
    import ray

    from raylab.kernel import warm_workers

    working = warm_workers.work_started()
    assert not working()
    with warm_workers.own_work():
        raylabs = ray.put(b"raylab's own")
        assert not working()
    assert not working()
    users = ray.put(b"the user's")
    assert working()
    del raylabs, users
    assert not working()


def test_the_worker_nodes_share_the_machines_cores_for_starting_workers(up: str) -> None:
    """Each worker node's raylet may start cores / nodes worker processes at once, not
    Ray's default of the machine's cores each: more Python processes starting at once than
    there are cores only slow the one already running the user's tasks."""
    from raylab.backends.local.backend import STARTUP_CONCURRENCY_ENV, startup_concurrency
    from raylab.backends.local.processes import NODE_ENV

    told = {
        env[NODE_ENV]: env.get(STARTUP_CONCURRENCY_ENV)
        for _, command, env in cluster_processes(NAME)
        if Path(command).name == "raylet"
    }
    each = str(startup_concurrency(2))  # its arithmetic is tested in tests/unit
    assert told == {"head": None, "worker-1": each, "worker-2": each}, told


def test_a_workers_first_task_finds_it_ready(up: str) -> None:
    """Each worker of a local cluster loads what its serialization context needs (numpy,
    pyarrow, pydantic, starlette: up to 1.6 s on two busy cores) before it registers, so
    no task waits on a worker still loading them, as a burst of small tasks did
    (worker_main.py). A task with no arguments builds no context: without the head start,
    its worker has none of them loaded."""
    import uuid

    import ray

    @ray.remote
    def loaded() -> list[str]:
        import sys

        return [m for m in ("numpy", "pyarrow", "pydantic", "starlette") if m in sys.modules]

    # An environment of its own: a new worker process, whose first task this is.
    fresh = loaded.options(runtime_env={"env_vars": {"PROBE": uuid.uuid4().hex}})
    assert ray.get(fresh.remote()) == ["numpy", "pyarrow", "pydantic", "starlette"]


def test_ray_data_runs(up: str) -> None:
    import ray

    total = ray.data.range(20_000).map_batches(lambda b: {"id": b["id"] * 2}).sum("id")
    assert total == 2 * sum(range(20_000))
    items = ray.data.from_items([{"k": i % 3, "v": i} for i in range(300)])
    counts = {r["k"]: r["count()"] for r in items.groupby("k").count().take_all()}
    assert counts == {0: 100, 1: 100, 2: 100}


def test_large_objects_and_actors(up: str) -> None:
    import numpy as np
    import ray

    big = np.arange(50 * 2**20 // 8, dtype=np.int64)  # 50 MiB
    ref = ray.put(big)

    @ray.remote(num_gpus=1)
    def where_and_sum(a: Any) -> tuple[str, int]:
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES", ""), int(a.sum())

    device, total = ray.get(where_and_sum.remote(ref))
    assert device in ("0", "1")
    assert total == int(big.sum())
    back = ray.get(ref)
    assert not back.flags.writeable  # zero-copy out of the object store, as a driver gets it

    @ray.remote
    class Counter:
        def __init__(self) -> None:
            self.n = 0

        def add(self, k: int) -> int:
            self.n += k
            return self.n

    counter = Counter.remote()  # type: ignore[attr-defined]
    assert ray.get([counter.add.remote(1) for _ in range(50)])[-1] == 50


def test_tune_and_train(up: str, tmp_path: Path) -> None:
    import ray
    from ray import train, tune
    from ray.train import Checkpoint, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    def trial(config: dict[str, Any]) -> None:
        tune.report({"score": config["x"] ** 2})

    grid = tune.Tuner(
        trial,
        param_space={"x": tune.grid_search([1, 2, 3])},
        run_config=tune.RunConfig(storage_path=str(tmp_path / "tune"), name="grid"),
    ).fit()
    assert sorted(r.metrics["score"] for r in grid) == [1, 4, 9]

    def loop(config: dict[str, Any]) -> None:
        import os
        import tempfile

        ctx = train.get_context()
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "rank").write_text(str(ctx.get_world_rank()))
            checkpoint = Checkpoint.from_directory(folder) if ctx.get_world_rank() == 0 else None
            train.report(
                {"gpus": os.environ.get("CUDA_VISIBLE_DEVICES", "")}, checkpoint=checkpoint
            )

    result = DataParallelTrainer(
        loop,
        scaling_config=ScalingConfig(num_workers=2, use_gpu=True, resources_per_worker={"CPU": 0}),
        run_config=RunConfig(storage_path=str(tmp_path / "train"), name="dp"),
    ).fit()
    assert result.error is None
    assert result.checkpoint is not None
    with result.checkpoint.as_directory() as folder:
        assert Path(folder, "rank").read_text() == "0"
    assert ray.is_initialized()


def cell(shell: InteractiveShell, source: str) -> Any:
    """Run a cell as the notebook would; its error fails the test, its value comes back."""
    result = shell.run_cell(source)
    assert result.success, result.error_in_exec or result.error_before_exec
    return result.result


def test_a_module_written_after_up_reaches_the_workers_and_so_do_its_edits(
    shell: InteractiveShell, up: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The working dir shipped at `up` was empty: helper.py comes later, and changes."""
    monkeypatch.syspath_prepend(str(Path.cwd()))  # as a kernel's path starts with its folder
    helper = Path.cwd() / "helper.py"
    helper.write_text("def value():\n    return 'first'\n")
    cell(shell, "%load_ext autoreload")
    cell(shell, "%autoreload 2")
    define = "import helper, ray\n@ray.remote\ndef ask():\n    return helper.value()"
    cell(shell, define)
    assert cell(shell, "ray.get(ask.remote())") == "first"
    helper.write_text("def value():\n    return 'edited'\n")
    stat = helper.stat()
    os.utime(helper, (stat.st_atime, stat.st_mtime + 2))  # autoreload compares mtimes
    assert cell(shell, "ray.get(ray.remote(helper.value).remote())") == "edited"
    # Ray sends a remote function's code once: its cell, run again, sends the edit too.
    cell(shell, define)
    assert cell(shell, "ray.get(ask.remote())") == "edited"
    cell(shell, "%autoreload 0")


# A kernel shut down while still connected, after a dataset ran: Ray Data's poller is
# emptied as it exits, so it cannot poll as the interpreter finalizes, which aborted a
# notebook pod's kernel. The check is registered before raylab loads: exit hooks run last
# first, so it runs after raylab's.
EXITING_KERNEL = f"""\
import atexit
from ray.data._internal.usage import poller
atexit.register(lambda: print("AT EXIT", poller._poller, flush=True))
from IPython.core.interactiveshell import InteractiveShell
ip = InteractiveShell.instance()
ip.run_line_magic("load_ext", "raylab")
ip.run_line_magic("raycluster", "connect {NAME} --no-sync")
import ray
assert ray.data.range(10).sum("id") == 45
print("POLLING", bool(poller._poller._metrics), flush=True)
"""


def test_a_kernel_that_exits_connected_stops_ray_datas_poller(up: str) -> None:
    # Ray Data starts its poller only where Ray's usage stats are on (tests turn them off).
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="1")
    done = subprocess.run([sys.executable, "-c", EXITING_KERNEL], capture_output=True,
                          text=True, env=env, timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert "POLLING True" in lines, done.stdout
    assert lines[-1] == "AT EXIT None", done.stdout
    assert "Fatal Python error" not in done.stderr


def test_disconnect_and_connect_again(shell: InteractiveShell, up: str) -> None:
    import ray
    from ray.data._internal.usage import poller

    # Ray Data's, as a dataset's first run starts it where usage stats are on (tests turn
    # them off, so this call starts it).
    polling = poller.get_poller()
    assert polling._metrics
    out = run(shell, "disconnect")
    assert NAME in out
    assert connected_cluster() is None
    assert not ray.is_initialized()
    # It no longer asks the cluster's Prometheus, which a poll as the kernel exits turned
    # into an aborted process; the next connection's datasets get one of their own.
    assert polling._metrics == {}
    assert poller._poller is None
    out = run(shell, f"connect {NAME}")
    assert f"Connected this kernel to {NAME} as a Ray driver" in out
    assert ray.get(ray.put(41)) + 1 == 42
    assert ray.data.range(10).sum("id") == 45
    fresh = poller.get_poller()  # what this connection's datasets get
    assert fresh is not polling
    assert fresh._metrics
