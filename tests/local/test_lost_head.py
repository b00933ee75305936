"""A head that dies under a kernel driving it: one line, the waiting cell stops, the kernel
lives on.

A direct driver whose GCS is gone waits forever in `ray.get`, and Ray ends the driver's
whole process 60 seconds later: a notebook kernel would die with every variable in it.
A real kernel (nbclient) brings a cluster up and waits in `ray.get` on a task that
sleeps; the head node's processes are then killed (SIGKILL, as the OOM killer would).
The cell must stop within seconds with the one line that says what happened, the
kernel keeps its variables (the same process, well past Ray's 60 seconds), a Ray call
does not quietly start a Ray of its own, `status` says why, and `down` cleans up.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import nbformat
import psutil
from nbclient import NotebookClient

from tests.conftest import processes_of_this_session
from tests.local.kernels import nothing_left, run, shown
from tests.local.test_notebook import text_of

NAME = "lost1"
WAIT = """\
import ray, time
@ray.remote
def sleeper():
    time.sleep(600)
started = time.monotonic()
ray.get(sleeper.remote())
"""


def kill_the_head(state_dir: Path) -> None:
    """The head's supervisor, its `ray start` and the daemons it started: one process group."""
    nodes = json.loads((state_dir / NAME / "cluster.json").read_text())["nodes"]
    [head] = [n for n in nodes if n["role"] == "head"]
    os.killpg(os.getpgid(head["pid"]), signal.SIGKILL)


def test_a_lost_head_stops_the_waiting_cell_and_the_kernel_lives(state_dir: Path) -> None:
    client = NotebookClient(nbformat.v4.new_notebook(), timeout=600, kernel_name="python3",
                            allow_errors=True)  # fmt: skip
    with nothing_left(state_dir, NAME), client.setup_kernel():
        run(client, "%load_ext raylab")
        up = run(client, f"%raycluster up --name {NAME} --workers 1 --cpus 1 --memory 1Gi")
        assert f"Connected this kernel to {NAME} as a Ray driver" in text_of(up)
        kernel = text_of(run(client, "import os\nkept = 42\nos.getpid()")).strip()
        gcs = [p for p in processes_of_this_session() if p.name() == "gcs_server"]
        assert len(gcs) == 1, gcs

        killed = threading.Timer(8.0, kill_the_head, [state_dir])
        killed.start()
        began = time.monotonic()
        waiting = run(client, WAIT)
        stopped_after = time.monotonic() - began - 8.0
        killed.join()
        assert not gcs[0].is_running() or gcs[0].status() == psutil.STATUS_ZOMBIE
        said = shown(waiting)
        assert f"Lost cluster {NAME}: its head (127.0.0.1:" in said, said
        assert "the cell waiting on it was stopped" in said, said
        assert f"`%raycluster status {NAME}` says why" in said, said
        assert said.count("Lost cluster") == 1, said
        # Stopped by raylab's watch (seconds), not by Ray ending the process (60 s).
        assert stopped_after < 45, stopped_after

        time.sleep(65)  # past the 60 s after which Ray ends a driver whose GCS is gone
        after = text_of(run(client, "print(kept, os.getpid())")).split()
        assert after == ["42", kernel], after
        again = shown(run(client, "ray.put(1)"))
        assert "Ray has not been started yet" in again, again
        assert "Lost cluster" not in again  # said once

        status = text_of(run(client, f"%raycluster status {NAME}"))
        assert "Failed" in status, status
        assert "head process exited" in status, status

        down = run(client, f"%raycluster down {NAME}")
        assert text_of(down).strip() == f"Deleted {NAME}."
