"""Start this kernel's worker processes where its work will run, while the user types.

Ray starts a job's worker processes at its first tasks, and prestarts them only on the
driver's own node (ray #40131), which in raylab offers no CPU (the head, or the kernel's
joined node). So a notebook's first cell paid for starting a Python process per CPU,
each importing Ray, on a machine busy doing just that.

On connect, a background thread sends one tiny task per CPU to every node that offers
CPUs, pinned there. Ray starts a worker for each, of this job and with its runtime env,
and keeps them idle afterwards (up to a node's CPU count), ready for the user's tasks.
Tasks that cannot be placed within `WAIT_S` (a cluster busy with other work) are
cancelled: warming is a head start, never a queue in front of the user's own work.
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
TASK_NAME = "raylab: warm workers"

log = logging.getLogger("raylab")


def start(nodes: int) -> threading.Thread:
    """Warm the workers of the first `nodes` nodes with CPUs to appear (the cluster's
    worker count: the kernel connects while its workers still start), in a daemon thread;
    returns it (tests join it)."""
    thread = threading.Thread(target=_warm, args=(nodes,), name="raylab-warm-workers", daemon=True)
    thread.start()
    return thread


def plan(nodes: list[dict[str, Any]], driver_node: str | None) -> dict[str, tuple[int, int]]:
    """How many workers to start on each node (by node ID), as (for GPU tasks, for CPU
    tasks), on the live nodes with CPUs other than the driver's own.

    Ray gives a worker that ran a CPU task no GPU task and the reverse, and keeps at most
    one idle worker per CPU (it ends the others after a second): so one per GPU first,
    what the node is for, then one per CPU left, MAX_PER_NODE in all."""
    wanted: dict[str, tuple[int, int]] = {}
    for node in nodes:
        resources = node.get("Resources", {})
        cpus, gpus = int(resources.get("CPU", 0)), int(resources.get("GPU", 0))
        if node.get("Alive") and cpus > 0 and node["NodeID"] != driver_node:
            for_gpu = min(gpus, cpus, MAX_PER_NODE)
            wanted[node["NodeID"]] = (for_gpu, min(cpus, MAX_PER_NODE) - for_gpu)
    return wanted


def _warm(expected: int) -> None:
    try:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        @ray.remote(max_retries=0)
        def warm() -> None:
            time.sleep(HOLD_S)

        # Ray prestarts workers on the driver's own node itself.
        driver_node = ray.get_runtime_context().get_node_id()
        deadline = time.monotonic() + WAIT_S
        warmed: set[str] = set()
        refs: list[Any] = []
        while len(warmed) < expected and time.monotonic() < deadline:
            nodes = ray.nodes()  # type: ignore[no-untyped-call]
            for node, (gpus, cpus) in plan(nodes, driver_node).items():
                if node in warmed:
                    continue
                warmed.add(node)
                pinned = NodeAffinitySchedulingStrategy(node, soft=False)
                on_cpu = warm.options(name=TASK_NAME, scheduling_strategy=pinned, num_cpus=1)
                refs += [on_cpu.remote() for _ in range(cpus)]
                # No CPU asked: they start beside the CPU workers, not after them.
                on_gpu = warm.options(
                    name=TASK_NAME, scheduling_strategy=pinned, num_cpus=0, num_gpus=1
                )
                refs += [on_gpu.remote() for _ in range(gpus)]
            if len(warmed) < expected:
                time.sleep(POLL_S)
        if not refs:
            return
        left = max(0.0, deadline - time.monotonic())
        _, pending = ray.wait(refs, num_returns=len(refs), timeout=left)
        for ref in pending:
            ray.cancel(ref)
    except Exception as exc:  # the kernel disconnected meanwhile: warming is best effort
        log.debug("warming workers stopped: %s", exc)
