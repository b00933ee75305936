"""The sidebar's card says what the notebook's card says: render.ts against render.py.

Runs the built labextension/lib/render.js (made by `npm run build:prod`, as the Makefile
does) in Node on the same clusters, and compares the environment row word for word.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from raylab import render
from raylab.environment import ClusterEnvironment
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec

ROOT = Path(__file__).resolve().parents[2]
RENDER_JS = ROOT / "labextension" / "lib" / "render.js"

ENVIRONMENTS = [
    ClusterEnvironment(
        working_dir="/nb", working_dir_bytes=int(3.2 * 2**20), pip=("a", "b"), env_names=("X", "Y")
    ),
    ClusterEnvironment(working_dir="/nb", working_dir_bytes=1280, local_packages=("p",)),
    ClusterEnvironment(working_dir="/nb", working_dir_bytes=2**20 - 50, wheels=("/w.whl",)),
    ClusterEnvironment(pip=("a",), env_names=("TOKEN",)),
    ClusterEnvironment(),
    None,
]


@pytest.mark.skipif(not RENDER_JS.is_file(), reason="labextension not built (npm run build:lib)")
@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed")
def test_the_environment_row_reads_the_same_in_both_cards(tmp_path: Path) -> None:
    base = ClusterInfo(
        name="c1", owner="u", backend="local", phase=Phase.READY,
        spec=ClusterSpec(name="c1", gpus=0, gpu_type="cpu", workers=1, cpus="1", memory="1Gi"),
        ray_version="2.60.0", python_version="3.11",
    )  # fmt: skip
    clusters = [replace(base, environment=env) for env in ENVIRONMENTS]
    module = tmp_path / "render.mjs"  # an ES module, whatever package.json says
    module.write_text(RENDER_JS.read_text())
    script = (
        f"import {{ cardFields }} from {json.dumps(str(module))};\n"
        "const clusters = JSON.parse(process.argv[1]);\n"
        "console.log(JSON.stringify(clusters.map(c => "
        "cardFields(c, c.created).filter(([k]) => k === 'Environment'))));\n"
    )
    done = subprocess.run(
        ["node", "--input-type=module", "-e", script,
         json.dumps([c.to_json() for c in clusters])],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    sidebar = json.loads(done.stdout)
    notebook = [[list(f) for f in render.card_fields(c) if f[0] == "Environment"] for c in clusters]
    assert sidebar == notebook
    assert notebook[0] == [["Environment", "working dir 3.2 MiB · 2 pip packages · 2 env vars"]]
    assert notebook[-1] == []  # no environment remembered: no row
