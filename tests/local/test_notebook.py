"""Whole journeys in a real kernel (nbclient) and through the `raylab` CLI.

1. The notebook from the README: `up --gpus 2 --workers 2`, four `num_gpus=1` tasks that
   report their CUDA_VISIBLE_DEVICES and node, `status`, `down`; then no Ray process.
2. A cluster made by the CLI, connected from a notebook; the kernel exits and the
   cluster lives on (nothing is deleted unless asked); the CLI lists it and deletes it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from tests.conftest import processes_of_this_session

TASKS = """\
import json, time
import ray

@ray.remote(num_gpus=1)
def where():
    import os
    time.sleep(2)  # hold the GPU so the four tasks spread over both workers
    return os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_runtime_context().get_node_id()

print(json.dumps(ray.get([where.remote() for _ in range(4)])))
"""


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


def test_readme_notebook_end_to_end() -> None:
    cells = execute(
        [
            "%load_ext raylab",
            "%raycluster up --name nb1 --gpus 2 --workers 2 --cpus 1 --memory 1Gi",
            TASKS,
            "%raycluster status",
            "%raycluster down nb1",
        ]
    )
    up = cells[1]
    # In a notebook the progress is a live widget card, then a line saying we connected.
    assert any("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in up.outputs)
    assert "Connected this kernel to nb1" in text_of(up)

    results = json.loads(text_of(cells[2]))
    assert len(results) == 4
    assert {devices for devices, _ in results} == {"0"}  # one GPU on each worker
    assert len({node for _, node in results}) == 2  # ...and both workers were used

    status = text_of(cells[3])
    assert "Phase: Ready" in status
    assert "Workers: 2/2 ready" in status
    assert "GPUs: 2 × a100 (logical)" in status
    assert text_of(cells[4]).strip() == "Deleted nb1."
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
    bad = cli("up", "--gpus", "3", "--workers", "2")
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        "raylab: error: --gpus: 3 GPUs cannot be split evenly across 2 workers; "
        "use --gpus 2 or 4, or --workers 1, 3"
    ]
    assert os.listdir(os.environ["RAYLAB_STATE_DIR"]) in ([], [".lock"])
