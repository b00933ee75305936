"""Whole journeys in a real kernel (nbclient) and through the `raylab` CLI.

1. The quick-start notebook that `make lab` opens (examples/quickstart.ipynb), run as
   it is: `up --gpus 2 --workers 1`, four `num_gpus=1` tasks that report their
   CUDA_VISIBLE_DEVICES and node, `status`, `list`, `down`; then no Ray process.
2. A cluster made by the CLI, connected from a notebook; the kernel exits and the
   cluster lives on (nothing is deleted unless asked); the CLI lists it and deletes it.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from tests.conftest import processes_of_this_session

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.ipynb"


def execute(cells: list[str]) -> list[Any]:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in cells]
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    return list(nb.cells)


def text_of(cell: Any) -> str:
    parts = []
    for out in cell.outputs:
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "".join(parts)


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    raylab = Path(sys.executable).with_name("raylab")
    cmd = [str(raylab)] if raylab.exists() else [sys.executable, "-m", "raylab.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600)


def test_quickstart_notebook_end_to_end() -> None:
    nb = nbformat.read(str(QUICKSTART), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3").execute()
    code = [c for c in nb.cells if c.cell_type == "code"]
    sources = [c.source for c in code]
    assert sources[1].startswith("%raycluster up --name quickstart --gpus 2 --workers 1")
    up = code[1]
    # In a notebook the progress is a live widget card, then a line saying we connected.
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in up.outputs)
    assert "Connected this kernel to quickstart" in text_of(up)

    resources = text_of(code[2])
    assert "'GPU': 2.0" in resources, resources
    # The cell's value: Ray may forward a node's log line (log_to_driver) into its streams.
    [value] = [o for o in code[3].outputs if o.output_type == "execute_result"]
    placed = ast.literal_eval(value.data["text/plain"])  # a list of (devices, node) pairs
    assert len(placed) == 4
    assert {devices for devices, _ in placed} == {"0", "1"}  # both GPUs of the worker
    assert len({node for _, node in placed}) == 1

    status = text_of(code[4])
    assert "Phase: Ready" in status
    assert "Workers: 1/1 ready" in status
    assert "GPUs: 2 × a100 (logical)" in status
    assert text_of(code[5]).splitlines()[1].split()[:3] == ["quickstart", "Ready", "1/1"]
    assert text_of(code[6]).strip() == "Deleted quickstart."
    assert processes_of_this_session() == []


def test_cli_cluster_outlives_the_kernel_that_used_it() -> None:
    made = cli("up", "--name", "cli1", "--workers", "0", "--cpus", "1")
    assert made.returncode == 0, made.stderr
    assert "cli1  ·  Ready" in made.stdout
    assert "%raycluster connect cli1" in made.stdout  # the CLI says how to attach

    cells = execute(
        [
            "%load_ext raylab",
            "%raycluster connect cli1",
            "import ray\nprint(ray.get(ray.remote(lambda: 6 * 7).remote()))",
            "%raycluster up --name cli1 --no-connect",
        ]
    )
    assert "Connected this kernel to cli1" in text_of(cells[1])
    assert text_of(cells[2]).strip() == "42"
    assert text_of(cells[3]).startswith("cli1 already exists (Ready); using it.")

    # The kernel has exited; the cluster has not.
    listed = cli("list")
    assert listed.returncode == 0
    row = next(ln for ln in listed.stdout.splitlines() if ln.startswith("cli1"))
    assert row.split()[1:3] == ["Ready", "0/0"]
    status = cli("status", "cli1")
    assert "Phase:" in status.stdout
    assert "Ready" in status.stdout
    assert processes_of_this_session(), "the cluster's processes should still be running"

    gone = cli("down", "cli1")
    assert (gone.returncode, gone.stdout.strip()) == (0, "Deleted cli1.")
    assert processes_of_this_session() == []
    again = cli("down", "cli1")
    assert again.returncode == 1
    assert again.stderr.startswith("raylab: no cluster named 'cli1'")
    assert "Traceback" not in again.stderr


def test_cli_bad_input_is_one_line() -> None:
    state = os.environ["RAYLAB_STATE_DIR"]
    before = sorted(os.listdir(state)) if os.path.isdir(state) else []
    bad = cli("up", "--gpus", "3", "--workers", "2")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "raylab: error: --gpus: 3 GPUs cannot be split evenly across 2 workers; "
        "use --gpus 2 or 4, or --workers 1, 3"
    ]
    after = sorted(os.listdir(state)) if os.path.isdir(state) else []
    assert after == before, "a refused `up` created something"
