"""Start this kernel's worker processes where its work will run, while the user types.

Ray starts a job's worker processes at its first tasks, and prestarts them only on the
driver's own node (ray #40131), which in raylab offers no CPU (the head, or the kernel's
joined node). So a notebook's first cell paid for starting a Python process per CPU,
each importing Ray, on a machine busy doing just that.

On connect, a background thread asks each node where work runs, as it joins, to start
workers of this job with its runtime env (`plan`: the node's CPUs, at most MAX_PER_NODE,
and its share of `limit`), through the raylet's own PrestartWorkers call, the one Ray
makes for the driver's node. A prestarted worker has run no task, so it takes the first
GPU task or CPU task alike: Ray gives a worker that ran a GPU task no CPU task and the
reverse, so warming with tasks (as raylab did first) left a claimed standby's burst of
small tasks waiting for new workers behind the first GPU task's. It also holds no CPU or
GPU while it waits: nothing queues in front of the user's tasks.

They go out GRACE_S after connecting, and only while the user's code has started no work
on the cluster: work that comes at once (the rest of the cell that connected, or "Run All")
makes Ray start its workers itself, and a prestart beside it only started a second
process per node on the same cores, which slowed that work (a burst of 200 tasks right
after connecting in a notebook pod, on the test machine's two cores: 1.5 s against
0.95 s by hand, 0.9 to 1.2 s without the prestart; docs/benchmarks.md, `incluster`).
A cell typed after connecting finds them started. (Warming with tasks went out only
between cells, as their tasks held the GPUs a first task needed.)
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

# At most this many workers per node: a 64-CPU node would otherwise start 64 processes
# for a notebook that may run one task.
MAX_PER_NODE = 8
# How long the thread waits for nodes to join before it ends: warming is a head start for
# the first cells, not a service.
WAIT_S = 60.0
# How often the thread looks for nodes that joined (the kernel connects while workers start).
POLL_S = 0.5
# How long Ray keeps a prestarted worker though idle and beyond the node's CPU count (it
# otherwise ends those after a second; the plan stays within the count, so this only
# covers a node whose other jobs hold idle workers too).
KEEP_ALIVE_S = 60
# How long a node's raylet may take to answer the call.
CALL_S = 5.0
# How long after connecting the first prestart waits for work that comes at once.
GRACE_S = 1.0
# How long a disconnect waits for the thread's Ray call in progress (one poll, normally).
JOIN_S = 10.0
# At most this many in all (a local cluster: the machine's cores, see connect.py).
MAX_IN_ALL = 64
# The resource only the head node offers.
HEAD_RESOURCE = "node:__internal_head__"

log = logging.getLogger("raylab")


_lock = threading.Lock()
_running: tuple[threading.Thread, threading.Event] | None = None
_own = 0  # raylab's own calls to the cluster in progress (own_work)


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
    nodes: list[dict[str, Any]], driver_node: str | None, limit: int, share: int
) -> dict[str, int]:
    """How many workers to start on each node (by node ID): on the live nodes with CPUs
    other than the driver's own, one per CPU, at most MAX_PER_NODE and `share` a node
    (nodes that join later get theirs too), `limit` in all; nodes with GPUs first."""
    wanted: dict[str, int] = {}
    ranked = sorted(nodes, key=lambda n: -float(n.get("Resources", {}).get("GPU", 0)))
    for node in ranked:
        cpus = int(node.get("Resources", {}).get("CPU", 0))
        take = min(cpus, MAX_PER_NODE, share, limit)
        if node.get("Alive") and node["NodeID"] != driver_node and take > 0:
            wanted[node["NodeID"]] = take
            limit -= take
    return wanted


def _warm(workers: int, limit: int, done: threading.Event) -> None:
    try:
        import ray

        start_on = _prestarter()
        working = work_started()
        # Ray prestarts workers on the driver's own node itself.
        driver_node = ray.get_runtime_context().get_node_id()
        share = max(1, limit // max(workers, 1))
        deadline = time.monotonic() + WAIT_S
        planned: set[str] = set()  # every node is planned once, when first seen
        if done.wait(GRACE_S):
            return
        while True:
            if working():
                log.debug("warming workers stopped: the user's work has started")
                return
            nodes = [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]
            new = [n for n in nodes if n["NodeID"] not in planned]
            by_id = {n["NodeID"]: n for n in new}
            for node_id, count in plan(new, driver_node, limit, share).items():
                start_on(by_id[node_id], count)
                limit -= count
            planned |= {n["NodeID"] for n in new}
            joined = [n for n in nodes if n["NodeID"] != driver_node
                      and HEAD_RESOURCE not in n.get("Resources", {})]  # fmt: skip
            if len(joined) >= workers or time.monotonic() >= deadline:
                break
            if done.wait(POLL_S):
                return
    except Exception as exc:  # the cluster went away meanwhile: warming is best effort
        log.debug("warming workers stopped: %s", exc)


@contextlib.contextmanager
def own_work() -> Iterator[None]:
    """raylab's own call to the cluster (the drift check's task, at the end of `up`):
    the references it makes are not the user's work starting."""
    global _own
    with _lock:
        _own += 1
    try:
        yield
    finally:
        with _lock:
            _own -= 1


def work_started() -> Callable[[], bool]:
    """Whether this driver has started work of the user's since now: it holds object
    references it did not hold (each task it submits, each `ray.put`, makes one;
    raylab's first task has ended by now, and own_work's are left out). A task that
    already ended and was let go is not seen: its workers are up, and a prestart then
    only adds idle ones."""
    from ray._private import worker

    core: Any = worker.global_worker.core_worker  # type: ignore[attr-defined]
    held = set(core.get_all_reference_counts())

    def working() -> bool:
        now = set(core.get_all_reference_counts())
        if _own:
            held.update(now)
            return False
        return not now <= held

    return working


def _prestarter() -> Callable[[dict[str, Any], int], None]:
    """Ask a node's raylet to start `count` workers of this driver's job, with the job's
    runtime env as its tasks carry it (so they are the workers its tasks would start).
    Ray's own protocol and channel (its token auth and TLS); Ray calls it only for the
    driver's node, so it has no public API for another's."""
    from ray._private import worker
    from ray._private.grpc_utils import init_grpc_channel
    from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc

    core: Any = worker.global_worker.core_worker  # type: ignore[attr-defined]
    job = core.get_current_job_id().binary()
    env = core.get_job_config().runtime_env_info

    python: int = common_pb2.PYTHON  # type: ignore[attr-defined]

    def start_on(node: dict[str, Any], count: int) -> None:
        request = node_manager_pb2.PrestartWorkersRequest(  # type: ignore[attr-defined]
            language=python,
            job_id=job,
            runtime_env_info=env,
            keep_alive_duration_secs=KEEP_ALIVE_S,
            num_workers=count,
        )
        channel = init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}")
        try:
            stub: Any = node_manager_pb2_grpc.NodeManagerServiceStub(channel)  # type: ignore[no-untyped-call]
            stub.PrestartWorkers(request, timeout=CALL_S)
        finally:
            channel.close()

    return start_on
