"""A cell becomes a Ray Job that outlives its kernel, on a real local cluster.

A cluster made from a shell with an env var; real kernels (nbclient) in a notebook
folder: the first connects, a module is written beside the notebook after that, a cell
defines a function and a constant, and a cell runs as a job; interrupting the cell stops
only the output. That kernel is shut down while the job runs; a new kernel finds the
job by name, follows its log to the end (complete, in order) and reads its result. A
third kernel: a failing job's cell shows the job's traceback and fails; two jobs at
once, one stopped; bad input gets one line and submits nothing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import nbformat
import pytest
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbformat import NotebookNode

from raylab.backends.local.backend import LocalBackend
from raylab.culler.activity import ActivityReader
from raylab.errors import RaylabError
from raylab.jobs.api import JobsApi
from tests.local.kernels import nothing_left, run, shown

NAME = "jobs1"
SECRET = "s3cr3t-value-42"
STEPS = 60
LONG = """\
%%raycluster job long1
import os, time, ray, helper

@ray.remote
def work(i):
    return double(i)

print(helper.shout("start"), len(os.environ["JOB_SECRET"]), flush=True)
for i in range(STEPS):
    print("step", i, flush=True)
    time.sleep(0.5)
{"sum": sum(ray.get([work.remote(i) for i in range(10)])),
 "secret": len(os.environ["JOB_SECRET"])}
"""

# Ray's log stream lags the log by a second or two (it polls the file each second): the
# cells are interrupted a few lines after the line they then show.
SLEEPER = """\
%%raycluster job sleeper
import time
for i in range(600):
    print("tick", i, flush=True)
    time.sleep(0.5)
"""


def kernel(folder: Path) -> NotebookClient:
    return NotebookClient(nbformat.v4.new_notebook(), timeout=600, kernel_name="python3",
                          resources={"metadata": {"path": str(folder)}})  # fmt: skip


def interrupted(client: NotebookClient, source: str, job: str, once: str) -> NotebookNode:
    """Run a cell, and interrupt it as the Stop button does once the job's log (read on
    the side, through the job API) shows `once`: the job is running by then."""
    state_dir = Path(os.environ["RAYLAB_STATE_DIR"])
    done = threading.Event()

    def watch() -> None:
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            with contextlib.suppress(RaylabError):
                if once in api(state_dir).logs(job):
                    assert client.km is not None
                    run_sync(client.km.interrupt_kernel)()
                    return
            time.sleep(0.3)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return run(client, source)
    finally:
        done.set()
        watcher.join(10)


def failing(client: NotebookClient, source: str) -> NotebookNode:
    client.allow_errors = True
    try:
        return run(client, source)
    finally:
        client.allow_errors = False


def error_of(cell: NotebookNode) -> str:
    """The one error a cell shows (IPython prints a magic's UsageError on stderr)."""
    errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
    errors += [o.text.strip() for o in cell.outputs
               if o.get("name") == "stderr" and o.text.startswith("UsageError: ")]  # fmt: skip
    assert len(errors) == 1, cell.outputs
    return errors[0]


def api(state_dir: Path) -> JobsApi:
    backend = LocalBackend(state_dir)
    info = backend.get(NAME)
    assert info is not None
    return JobsApi(NAME, backend.dashboard_address(info) or "", backend.auth_token(NAME))


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The notebook's folder, and the module's cluster, made from a shell in that folder
    with an env var."""
    folder = tmp_path_factory.mktemp("job-notebook")
    up = [sys.executable, "-m", "raylab.cli", "up", "--name", NAME, "--workers", "1",
          "--cpus", "2", "--memory", "1Gi", "--env", f"JOB_SECRET={SECRET}"]  # fmt: skip
    made = subprocess.run(up, cwd=folder, capture_output=True, text=True, timeout=600)
    with nothing_left(Path(os.environ["RAYLAB_STATE_DIR"]), NAME):
        assert made.returncode == 0, made.stderr
        yield folder


def test_a_job_outlives_its_kernel_and_a_new_kernel_reads_its_log_and_result(
    folder: Path, state_dir: Path
) -> None:
    first = kernel(folder)
    with first.setup_kernel():
        run(first, "%load_ext raylab")
        connect = run(first, f"%raycluster connect {NAME}")
        assert f"Connected this kernel to {NAME}" in shown(connect)
        # Written after `up`: the job ships the folder as it is when it is submitted.
        (folder / "helper.py").write_text("def shout(s):\n    return s.upper()\n")
        run(first, f"def double(x):\n    return 2 * x\n\nSTEPS = {STEPS}\nrows = [1, 2]\n")
        cell = interrupted(first, LONG, "long1", "step 10\n")
        text = shown(cell)
        assert "Job long1 runs on jobs1 with STEPS, double from earlier cells;" in text, text
        assert f"START {len(SECRET)}" in text, text
        assert "step 0" in text, text
        assert "Stopped showing job long1's output; it goes on on jobs1" in text, text
    # The kernel is gone; the job is not.
    jobs = api(state_dir)
    assert jobs.get("long1").status == "RUNNING"

    second = kernel(folder)
    with second.setup_kernel():
        run(second, "%load_ext raylab")
        logs = shown(run(second, "%raycluster job logs long1 --follow")).splitlines()
        steps = [line for line in logs if line.startswith("step ")]
        assert steps == [f"step {i}" for i in range(STEPS)], logs
        assert not any("RAYLAB-RESULT" in line for line in logs)
        result = run(second, "%raycluster job result long1")
        assert shown(result).strip() == "{'sum': 90, 'secret': 15}", result.outputs
        assert shown(run(second, "r = %raycluster job result long1\nr['sum'] * 2")) == "180"
        table = shown(run(second, "%raycluster jobs"))
        row = next(line for line in table.splitlines() if line.startswith("long1 "))
        assert row.split()[1:3] == [NAME, "SUCCEEDED"], table
        assert row.endswith("In [4]"), table
    # The env var's value is in no part of the job that Ray shows or logs.
    job = jobs.client.get_job_info("long1")
    assert SECRET not in f"{job.entrypoint} {job.runtime_env} {job.metadata}"
    assert SECRET not in jobs.logs("long1")


def test_a_failing_job_two_at_once_stop_and_bad_input(folder: Path, state_dir: Path) -> None:
    third = kernel(folder)
    with third.setup_kernel():
        run(third, "%load_ext raylab")
        run(third, f"%raycluster connect {NAME}")
        before = {j.name for j in api(state_dir).list()}
        for source, says in [
            ("%%raycluster job --cluster nope\n1", "nope"),
            ("%%raycluster job\ntrain(model)", "'model', 'train', defined nowhere"),
            ('%%raycluster job "a\tb"\n1', "'a\\tb' is not a job name"),
            ("%%raycluster job x --gpus nan\n1", "--gpus: nan is out of range"),
            ("%%raycluster job x\n!ls", "line 1: magics and shell lines"),
            ("%%raycluster status\n1", "only `%%raycluster job [NAME]` takes a cell"),
            ("%raycluster job result nothere", "no job nothere on jobs1"),
        ]:
            cell = failing(third, source)
            error = error_of(cell)
            assert error.startswith("UsageError: "), (source, error)
            assert says in error, (source, error)
            assert "Traceback" not in shown(cell), cell.outputs
        assert {j.name for j in api(state_dir).list()} == before

        sleeper = interrupted(third, SLEEPER, "sleeper", "tick 6\n")
        assert "tick 0" in shown(sleeper), sleeper.outputs
        quick = run(third, "%%raycluster job quick\nprint('hi')\n6 * 7")
        assert shown(quick).splitlines()[-2:] == ["hi", "42"], quick.outputs
        jobs = api(state_dir)
        assert jobs.get("sleeper").status == "RUNNING"
        backend = LocalBackend(state_dir)
        info = backend.get(NAME)
        assert info is not None
        assert ActivityReader(backend).read(info).active

        again = failing(third, "%%raycluster job quick\n1")
        assert "has a job named quick already" in error_of(again)
        stop = run(third, "%raycluster job stop sleeper")
        assert "Stopping job sleeper on jobs1." in shown(stop)
        deadline = time.monotonic() + 60
        while jobs.get("sleeper").status != "STOPPED" and time.monotonic() < deadline:
            time.sleep(0.5)
        assert jobs.get("sleeper").status == "STOPPED"

        fails = failing(third, "%%raycluster job fails\nx = 1\nraise ValueError(f'bad {x}')")
        error = error_of(fails)
        assert error.startswith("UsageError: job fails failed: "), error
        text = shown(fails)
        assert "raise ValueError(f'bad {x}')" in text, text
        assert "ValueError: bad 1" in text, text
        table = shown(run(third, "%raycluster jobs"))
        states = {line.split()[0]: line.split()[2] for line in table.splitlines()[1:]}
        assert {k: states[k] for k in ("sleeper", "quick", "fails")} == {
            "sleeper": "STOPPED", "quick": "SUCCEEDED", "fails": "FAILED",
        }, table  # fmt: skip
