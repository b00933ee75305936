"""The `export` verb of `%raycluster` and `raylab`: arguments, then `export_notebook`.

Kept apart from the other verbs so that building the shared parser imports nothing heavy:
nbformat, IPython's transformer and pyflakes load only when an export runs.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import RaylabError

if TYPE_CHECKING:
    from ..config import Settings
    from ..model import ClusterInfo
    from .api import ExportResult

HELP = "turn this notebook and its cluster into a scheduled Dagster pipeline"


class _Output(Protocol):
    def line(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "notebook", metavar="NOTEBOOK", nargs="?",
        help="the .ipynb file (in a notebook: that notebook)",
    )  # fmt: skip
    parser.add_argument("--name", help="pipeline name (default: the notebook's file name)")
    parser.add_argument(
        "--cluster", metavar="NAME",
        help="run on a cluster like this one (default: the one this kernel is connected to)",
    )  # fmt: skip
    parser.add_argument(
        "--schedule", metavar="CRON", help='cron schedule in UTC (default "0 3 * * *": daily)'
    )
    parser.add_argument(
        "--cells", choices=("tagged", "all"),
        help="tagged: cells tagged export or step:NAME; all: every code cell "
        "(default: tagged when any cell is, else all)",
    )  # fmt: skip
    parser.add_argument(
        "--out", metavar="DIR", help="folder to write (default: NAME_pipeline beside it)"
    )
    parser.add_argument("--force", action="store_true", help="replace an earlier export in DIR")


def run_export(
    args: argparse.Namespace,
    *,
    connected_cluster_info: ClusterInfo | None,
    out: _Output,
    settings: Settings | None = None,
    lookup: Callable[[str], ClusterInfo] | None = None,
) -> ExportResult:
    """Export `args.notebook` (in a kernel: the kernel's own notebook).

    The cluster: `--cluster NAME` (through `lookup`, which applies ownership), else the
    cluster this kernel is connected to, else the configured defaults.
    """
    from .api import export_notebook

    notebook = args.notebook or this_notebook()
    if notebook is None:
        raise RaylabError(
            "which notebook? give its path",
            detail="for example: export analysis.ipynb (in a kernel started by Jupyter, "
            "the kernel's own notebook is the default)",
        )
    info, source = connected_cluster_info, None
    if args.cluster:
        if lookup is None:
            raise RaylabError("--cluster needs a cluster service", detail="a raylab bug")
        info, source = lookup(args.cluster), f"cluster {args.cluster!r} (--cluster)"
    elif info is not None:
        source = f"cluster {info.name!r}, which this kernel is connected to"
    result = export_notebook(
        notebook,
        out_dir=args.out,
        name=args.name,
        cluster=info,
        cluster_source=source,
        settings=settings,
        schedule=args.schedule,
        cells=args.cells or "auto",
        force=bool(args.force),
    )
    for warning in result.warnings:
        out.warn(warning)
    out.line(
        f"Exported {Path(notebook).name} to {result.out_dir}: the {result.name} pipeline "
        f"({len(result.files)} files; EXPORT.md says what went in). "
        f"Next: cd {result.out_dir} && pip install -e '.[test]' && pytest"
    )
    return result


def this_notebook(user_ns: dict[str, Any] | None = None) -> str | None:
    """The notebook of this kernel: jupyter_server tells a kernel it starts through
    JPY_SESSION_NAME, which ipykernel also puts in the namespace as `__session__`."""
    path = os.environ.get("JPY_SESSION_NAME")
    if not path:
        if user_ns is None:
            try:
                from IPython import get_ipython

                shell = get_ipython()
            except ImportError:
                shell = None
            user_ns = shell.user_ns if shell is not None else {}
        path = user_ns.get("__session__")
    return str(path) if path and str(path).endswith(".ipynb") else None
