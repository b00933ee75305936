"""Start this kernel's worker processes where its work will run, while the user types.

Ray starts a job's worker processes at its first tasks, and prestarts them only on the
driver's own node (ray #40131), which in raylab offers no CPU (the head, or the kernel's
joined node). So a notebook's first cell paid for starting a Python process per CPU,
each importing Ray, on a machine busy doing just that.

On connect, a background thread sends a few tiny tasks, pinned, to each node where work
runs as it joins (one per GPU, then one per CPU left: `plan`). Ray starts a worker for
each, of this job and with its runtime env, and keeps them idle afterwards (up to a
node's CPU count), ready for the user's tasks.
Tasks that cannot be placed within `WAIT_S` (a cluster busy with other work) are
cancelled: warming is a head start, never a queue in front of the user's own work.

So its tasks go out only while nothing of the user's runs (`allow`): while `up` still
waits for the cluster's workers, and between cells, as the user types. Measured on a
claimed standby, warming beside a first task that came at once took the GPUs and half
the cores from it (3.8 s to its result against 2.2 s without). A notebook run top to
bottom, or a script, is never between cells: its first tasks start their workers
themselves, as Ray's would. (Tasks already out when a cell begins are left to finish:
they went out seconds before, while `up` waited, and are nearly done.)
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

# At most this many workers per node: a 64-CPU node would otherwise start 64 processes
# for a notebook that may run one task.
MAX_PER_NODE = 8
# How long nodes may take to join, and the warm-up tasks to find a CPU, before the rest
# is cancelled.
WAIT_S = 60.0
# How often the thread looks for nodes that joined (the kernel connects while workers start).
POLL_S = 0.5
# Each task holds its CPU this long, so that the node's CPUs are taken at once and one
# worker each is started, instead of the first worker running them all in turn.
HOLD_S = 0.2
# How long a disconnect waits for the thread's Ray call in progress (one poll, normally).
JOIN_S = 10.0
# At most this many in all (a local cluster: the machine's cores, see connect.py).
MAX_IN_ALL = 64
TASK_NAME = "raylab: warm workers"
# The resource only the head node offers.
HEAD_RESOURCE = "node:__internal_head__"

log = logging.getLogger("raylab")


_lock = threading.Lock()
_running: tuple[threading.Thread, threading.Event] | None = None
_allowed = threading.Event()  # nothing of the user's runs now (see the module's text)


def allow(allowed: bool) -> None:
    """Let warming go out (nothing of the user's runs), or hold it back (a cell began)."""
    if allowed:
        _allowed.set()
    else:
        _allowed.clear()


def start(workers: int, limit: int) -> threading.Thread:
    """Warm the nodes where work runs, at most `limit` workers in all, in a daemon thread;
    returns it (tests join it). `workers`: the cluster's worker nodes, waited for as they
    join (the kernel connects while they still start); 0: a lone head does the work."""
    global _running
    stop()
    done = threading.Event()
    thread = threading.Thread(
        target=_warm, args=(workers, limit, done), name="raylab-warm-workers", daemon=True
    )
    with _lock:
        _running = (thread, done)
    thread.start()
    return thread


def stop() -> None:
    """End the warm-up before the driver disconnects: Ray ends a process whose thread calls
    it after `ray.shutdown`."""
    global _running
    with _lock:
        running, _running = _running, None
    if running is not None:
        thread, done = running
        done.set()
        if thread is not threading.current_thread():
            thread.join(JOIN_S)


def plan(
    nodes: list[dict[str, Any]], driver_node: str | None, limit: int
) -> dict[str, tuple[int, int]]:
    """How many workers to start on each node (by node ID), as (for GPU tasks, for CPU
    tasks), on the live nodes with CPUs other than the driver's own, `limit` in all.

    Ray gives a worker that ran a CPU task no GPU task and the reverse, and keeps at most
    one idle worker per CPU (it ends the others after a second): so one per GPU first,
    what the node is for, then one per CPU left, MAX_PER_NODE a node."""
    room: dict[str, tuple[int, int]] = {}
    for node in nodes:
        resources = node.get("Resources", {})
        cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
        if node.get("Alive") and cpus > 0 and node["NodeID"] != driver_node:
            for_gpu = min(gpus, cpus, MAX_PER_NODE)
            room[node["NodeID"]] = (for_gpu, min(cpus, MAX_PER_NODE) - for_gpu)
    wanted = {node_id: [0, 0] for node_id in room}
    for kind in (0, 1):  # every node's GPU workers before any node's CPU workers
        for node_id, counts in room.items():
            take = max(0, min(counts[kind], limit))
            wanted[node_id][kind], limit = take, limit - take
    return {n: (gpus, cpus) for n, (gpus, cpus) in wanted.items() if gpus or cpus}


def _warm(workers: int, limit: int, done: threading.Event) -> None:
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(max_retries=0)
        def warm() -> None:
            time.sleep(HOLD_S)

        # Ray prestarts workers on the driver's own node itself.
        driver_node = ray.get_runtime_context().get_node_id()
        deadline = time.monotonic() + WAIT_S
        planned: set[str] = set()  # every node is planned once, when first seen
        refs: list[Any] = []
        while True:
            nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
            new = [n for n in nodes if n["NodeID"] not in planned]
            wanted = plan(new, driver_node, limit)
            if wanted and not _until_allowed(done, deadline):
                break
            for node, (gpus, cpus) in wanted.items():
                pinned = NodeAffinitySchedulingStrategy(node, soft=False)
                on_cpu = warm.options(name=TASK_NAME, scheduling_strategy=pinned, num_cpus=1)
                refs += [on_cpu.remote() for _ in range(cpus)]
                # No CPU asked: they start beside the CPU workers, not after them.
                on_gpu = warm.options(
                    name=TASK_NAME, scheduling_strategy=pinned, num_cpus=0, num_gpus=1
                )
                refs += [on_gpu.remote() for _ in range(gpus)]
                limit -= gpus + cpus
            planned |= {n["NodeID"] for n in new}
            joined = [n for n in nodes if n["NodeID"] != driver_node
                      and HEAD_RESOURCE not in n.get("Resources", {})]  # fmt: skip
            if len(joined) >= workers or time.monotonic() >= deadline:
                break
            if done.wait(POLL_S):
                return
        while refs and time.monotonic() < deadline and not done.is_set():
            _, refs = ray.wait(refs, num_returns=len(refs), timeout=POLL_S)
        if refs and not done.is_set():
            for ref in refs:
                ray.cancel(ref)
    except Exception as exc:  # the cluster went away meanwhile: warming is best effort
        log.debug("warming workers stopped: %s", exc)


def _until_allowed(done: threading.Event, deadline: float) -> bool:
    """Wait until warming may go out; False when the connection ended or time ran out."""
    while not done.is_set() and time.monotonic() < deadline:
        if _allowed.wait(POLL_S):
            return True
    return False
