"""Imported by each Ray worker process of a local cluster before it takes work (Ray's
`preload_python_modules`): the job's serialization context, built ahead.

Ray builds a worker's serialization context at its first task (it imports numpy, pyarrow,
pydantic and starlette for their serializers: 0.15 s on an idle core, up to 1.6 s on two
busy ones). A worker the kernel warmed ran its first task of a burst that long, while the
burst waited (docs/benchmarks.md, `first_task`). Built here, it is built while the user
types. A worker started with no job yet builds the nil job's, which Ray hands to the
first job it runs.
"""

from __future__ import annotations

import contextlib


def _prepare() -> None:
    from ray._private import worker

    # A head start only: where it fails, the first task builds it as before.
    with contextlib.suppress(Exception):
        worker.global_worker.get_serialization_context()  # type: ignore[no-untyped-call]


_prepare()
