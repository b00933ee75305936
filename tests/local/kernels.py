"""A real kernel, driven cell by cell as a notebook is (nbclient), and the clean-up after."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient
from nbformat import NotebookNode

from raylab.backends.local.backend import LocalBackend
from tests.conftest import processes_of_this_session
from tests.local.test_notebook import text_of


def run(client: NotebookClient, source: str) -> NotebookNode:
    """Execute one cell in the client's kernel (an error in it fails the test, unless the
    client allows errors)."""
    cell = nbformat.v4.new_code_cell(source)
    client.nb.cells.append(cell)
    return client.execute_cell(cell, len(client.nb.cells) - 1)


def shown(cell: Any) -> str:
    """All a cell shows: its streams, its value and its error's name and message."""
    errors = [f"{o.ename}: {o.evalue}" for o in cell.outputs if o.output_type == "error"]
    return text_of(cell) + "\n".join(errors)


@contextmanager
def nothing_left(state_dir: Path, name: str) -> Iterator[None]:
    """The test's cluster is gone at the end (`down` in the test, else here), and so is
    every process of it."""
    try:
        yield
    finally:
        backend = LocalBackend(state_dir)
        if backend.get(name) is not None:  # the test failed before `down`
            backend.delete(name)
    assert processes_of_this_session() == []
