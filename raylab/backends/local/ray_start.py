"""`ray start`, without loading the rest of Ray's command line:
`python -m raylab.backends.local.ray_start ARGS...` runs `ray start ARGS...`.

Ray's `ray` command imports every command group before it runs one, among them Serve's
and the Jobs CLI, which load pandas and FastAPI: 1.8 s of CPU for each node's `ray start`
on this machine, against 0.5 s without them. A local cluster starts three nodes at once on
a laptop's cores, so that import was about a quarter of a cold `up`'s CPU before its
first task.
Ray's CLI adds those groups in `try` blocks and goes on without a group whose import
fails; this makes them fail (None in sys.modules), and runs Ray's own `start` command.

Where its supervisor says so (node.py, `--after`), it starts the node once another node
(the head) is up, after loading Ray: that load overlaps the head's start.
"""

from __future__ import annotations

import importlib.util
import os
import sys

from .node import AFTER_ENV, never_up, wait_for

MODULE = "raylab.backends.local.ray_start"
# The command groups `ray start` never uses (ray/scripts/scripts.py, at its end).
UNUSED_GROUPS = ("ray.serve.scripts", "ray.dashboard.modules.job.cli", "ray.util.state.state_cli")


def quick_ray_start() -> list[str] | None:
    """This launcher, where this Python has Ray (None: it has not; use the `ray` command)."""
    if importlib.util.find_spec("ray") is None:
        return None
    return [sys.executable, "-m", MODULE]


def main(args: list[str]) -> int:
    for name in UNUSED_GROUPS:
        sys.modules[name] = None  # type: ignore[assignment]  # an import that fails
    from ray.scripts.scripts import cli

    after = os.environ.pop(AFTER_ENV, "")  # not for the processes Ray starts
    if after and not wait_for(after):
        return never_up()
    # The whole `ray` group, as the `ray` command runs it (its logging options included).
    cli.main(args=["start", *args], prog_name="ray")
    return 0  # click exits on its own


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
