"""A kernel restarted while connected: `%raycluster connect` reattaches; the cluster is
not touched.

A real kernel (nbclient) brings a small cluster up and uses it: a detached actor counts
visits. The kernel is then restarted through its kernel manager twice: as the Restart
button does (a shutdown request, then a new kernel), and by force (the kernel killed at
once, as when it dies). Each time the new kernel loads raylab, connects by name, and Ray
works: the same actor goes on counting. Throughout, the cluster stays Ready, and its node
processes (each node's supervisor, the GCS and every raylet) are the very processes of
before: same pids, same start times. Then `down` leaves no process behind.
"""

from __future__ import annotations

import contextlib
import json
import threading
from pathlib import Path

import nbformat
import psutil
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbformat import NotebookNode

from raylab.backends.local.backend import LocalBackend
from raylab.backends.local.node import started
from raylab.model import Phase
from tests.conftest import processes_of_this_session
from tests.local.kernels import nothing_left, run
from tests.local.test_notebook import text_of

NAME = "restart1"
COUNT = """\
import ray
try:
    visits = ray.get_actor("visits", namespace="restart-test")
except ValueError:
    @ray.remote(num_cpus=0)
    class Visits:
        def __init__(self):
            self.n = 0
        def add(self):
            self.n += 1
            return self.n
    visits = Visits.options(name="visits", namespace="restart-test", lifetime="detached").remote()
print(ray.get(visits.add.remote()), ray.cluster_resources()["CPU"])
"""
FRESH = "import os, sys\nprint(os.getpid(), 'ray' in sys.modules)"
DAEMONS = ("gcs_server", "raylet")


def printed(cell: NotebookNode) -> list[str]:
    """What the cell printed itself: its stdout. A Ray driver also gets the cluster's
    daemons' error lines (`(pid=gcs_server) …`) on stderr, as any Ray script does."""
    return "".join(o.text for o in cell.outputs if o.get("name") == "stdout").split()


def restart(client: NotebookClient, now: bool) -> None:
    assert client.km is not None
    assert client.kc is not None
    run_sync(client.km.restart_kernel)(now=now)
    run_sync(client.kc.wait_for_ready)(timeout=120)


def node_processes(state_dir: Path) -> dict[str, tuple[int, float | None]]:
    """The cluster's long-lived processes, by what they are: (pid, start time)."""
    found = {}
    for node in json.loads((state_dir / NAME / "cluster.json").read_text())["nodes"]:
        label = f"{node['role']}-{node['index']} supervisor"
        found[label] = (node["pid"], started(node["pid"]))
    for proc in processes_of_this_session():
        with contextlib.suppress(psutil.Error):
            if proc.name() in DAEMONS:
                found[f"{proc.name()} {proc.pid}"] = (proc.pid, started(proc.pid))
    return found


class PhaseWatch:
    """Reads the cluster's phase five times a second, as any other process would."""

    def __init__(self, state_dir: Path) -> None:
        self.backend = LocalBackend(state_dir)
        self.seen: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.wait(0.2):
            info = self.backend.get(NAME)
            self.seen.append(info.phase if info else "gone")

    def close(self) -> list[str]:
        self.stop.set()
        self.thread.join(5)
        return self.seen


def test_kernel_restart_then_connect_reattaches_untouched(state_dir: Path) -> None:
    client = NotebookClient(nbformat.v4.new_notebook(), timeout=600, kernel_name="python3")
    with nothing_left(state_dir, NAME), client.setup_kernel():
        run(client, "%load_ext raylab")
        up = run(client, f"%raycluster up --name {NAME} --workers 1 --cpus 1 --memory 1Gi")
        assert f"Connected this kernel to {NAME}" in text_of(up)
        assert printed(run(client, COUNT)) == ["1", "1.0"]
        kernel_pid = text_of(run(client, FRESH)).split()[0]
        nodes = node_processes(state_dir)
        assert sorted(label.split()[0] for label in nodes) == [
            "gcs_server", "head-0", "raylet", "raylet", "worker-1",
        ]  # fmt: skip

        watch = PhaseWatch(state_dir)
        for visit, now in ((2, False), (3, True)):
            restart(client, now=now)
            # A new kernel: another process, with no Ray imported yet.
            fresh = text_of(run(client, FRESH)).split()
            assert fresh[0] != kernel_pid, fresh
            assert fresh[1] == "False", fresh
            kernel_pid = fresh[0]

            run(client, "%load_ext raylab")
            connected = run(client, f"%raycluster connect {NAME}")
            said = text_of(connected)
            assert f"Connected this kernel to {NAME} as a Ray driver (127.0.0.1:" in said
            assert printed(run(client, COUNT)) == [str(visit), "1.0"]
            assert node_processes(state_dir) == nodes, f"after restart (now={now})"

        phases = watch.close()
        assert phases, "the phase was never read"
        assert set(phases) == {Phase.READY}, phases

        down = run(client, f"%raycluster down {NAME}")
        assert text_of(down).strip() == f"Deleted {NAME}."
