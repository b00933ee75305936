"""The program of each Ray worker process of a local cluster: Ray's own default_worker.py,
run once the modules its first task would load are loaded, so that the worker registers
with its raylet ready to run tasks, not before.

A Ray worker builds its serialization context at its first task, and building it imports
numpy, pyarrow, pydantic and starlette for their serializers: 0.15 s on an idle core, up to
1.6 s on two busy ones. A worker registers first and builds it after, so a task given to a
worker that had just registered waited that long, and with it a burst whose other tasks a
ready worker had already run (docs/benchmarks.md, `first_task`). Here the imports come
before Ray's worker starts, so its raylet hands it work only once it is ready; while it
loads, the raylet gives the tasks to a worker that is.

The raylet runs this file by its path (ray_start.py names it as the nodes' worker program),
in whatever Python a task's runtime env picks, so it imports only Ray and the standard
library, never raylab.
"""

import contextlib
import os
import runpy
import sys


def run(script: str) -> None:
    """Load what a worker's serialization context needs, then run `script` as Python would
    have: as __main__, its folder first on the path, the same arguments."""
    # A head start only: where it fails, the first task loads them as before.
    with contextlib.suppress(Exception):
        from ray._private.serialization import SerializationContext

        # Imports its serializers' modules; the worker builds its own context later.
        SerializationContext(None)  # type: ignore[no-untyped-call]
    sys.path[0] = os.path.dirname(script)  # not this folder: its modules' names are generic
    sys.argv[0] = script
    runpy.run_path(script, run_name="__main__")


def default_worker() -> str:
    import ray._private.workers

    return os.path.join(os.path.dirname(ray._private.workers.__file__), "default_worker.py")


if __name__ == "__main__":
    run(default_worker())
