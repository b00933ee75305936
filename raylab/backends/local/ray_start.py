"""`ray start`, without loading the rest of Ray's command line:
`python -m raylab.backends.local.ray_start ARGS...` runs `ray start ARGS...`.

Ray's `ray` command imports every command group before it runs one, among them Serve's
and the Jobs CLI, which load pandas and FastAPI: 1.8 s of CPU for each node's `ray start`
on this machine, against 0.5 s without them. A local cluster starts three nodes at once on
a laptop's cores, so that import was about a quarter of a cold `up`'s CPU before its
first task.
Ray's CLI adds those groups in `try` blocks and goes on without a group whose import
fails; this makes them fail (None in sys.modules), and runs Ray's own `start` command.

Its nodes' workers start with worker_setup.py, which applies their runtime env without
importing Ray, then run worker_main.py, which loads what a worker's first task would before
Ray's worker registers (`ray start` has no option for either; Ray's RayParams has).

Where its supervisor says so (node.py, `--after`), it starts the node once another node
(the head) is up, after loading Ray: that load overlaps the head's start.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

from .node import AFTER_ENV, never_up, wait_for

MODULE = "raylab.backends.local.ray_start"
# The command groups `ray start` never uses (ray/scripts/scripts.py, at its end).
UNUSED_GROUPS = ("ray.serve.scripts", "ray.dashboard.modules.job.cli", "ray.util.state.state_cli")
# The programs the node's raylet starts for each worker process (run by their paths): the
# set-up, which applies the runtime env and execs the worker.
WORKER_SETUP = str(Path(__file__).with_name("worker_setup.py"))
WORKER_MAIN = str(Path(__file__).with_name("worker_main.py"))


def quick_ray_start() -> list[str] | None:
    """This launcher, where this Python has Ray (None: it has not; use the `ray` command)."""
    if importlib.util.find_spec("ray") is None:
        return None
    return [sys.executable, "-m", MODULE]


def main(args: list[str]) -> int:
    for name in UNUSED_GROUPS:
        sys.modules[name] = None  # type: ignore[assignment]  # an import that fails
    from ray.scripts.scripts import cli

    _start_workers_with(WORKER_SETUP, WORKER_MAIN)
    after = os.environ.pop(AFTER_ENV, "")  # not for the processes Ray starts
    if after and not wait_for(after):
        return never_up()
    # The whole `ray` group, as the `ray` command runs it (its logging options included).
    cli.main(args=["start", *args], prog_name="ray")
    return 0  # click exits on its own


def _start_workers_with(setup: str, program: str) -> None:
    """Make the node `ray start` builds start its workers with `setup`, then `program`
    (Ray's RayParams takes them as `setup_worker_path` and `worker_path`; the node uses
    Ray's setup_worker.py and default_worker.py where they are not given)."""
    from ray._private import parameter

    class RayParams(parameter.RayParams):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("setup_worker_path", setup)
            kwargs.setdefault("worker_path", program)
            super().__init__(*args, **kwargs)

    parameter.RayParams = RayParams  # type: ignore[misc]  # `ray start` looks it up at its call


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
