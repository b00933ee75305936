"""A local cluster's workers run worker_main.py: Ray's default_worker.py, once what a
worker's first task would load is loaded (tests/local/test_driver.py drives it in a
cluster)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from raylab.backends.local.ray_start import WORKER_MAIN

SCRIPT = """
import sys
loaded = [m for m in ("numpy", "pyarrow", "pydantic", "starlette") if m in sys.modules]
print("NAME", __name__)
print("ARGV", sys.argv)
print("PATH0", sys.path[0])
print("LOADED", loaded)
"""


def test_it_runs_the_script_as_python_would_once_the_serializers_are_loaded(
    tmp_path: Path,
) -> None:
    script = tmp_path / "worker.py"
    script.write_text(SCRIPT)
    # As the raylet's command runs it, with the script in place of Ray's worker.
    load = f"import runpy, sys; sys.argv = ['x', '--flag']; m = runpy.run_path({WORKER_MAIN!r})"
    ran = subprocess.run(
        [sys.executable, "-c", f"{load}; m['run']({str(script)!r})"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    out = ran.stdout
    assert "NAME __main__" in out, ran.stderr
    assert f"ARGV ['{script}', '--flag']" in out
    assert f"PATH0 {tmp_path}" in out
    assert "LOADED ['numpy', 'pyarrow', 'pydantic', 'starlette']" in out


def test_run_by_its_path_it_is_rays_worker() -> None:
    """By its path, as the raylet runs it: Ray's default_worker.py answers."""
    done = subprocess.run(
        [sys.executable, WORKER_MAIN, "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "usage: default_worker.py" in done.stdout


def test_the_launchers_nodes_start_their_workers_with_it() -> None:
    probe = (
        "from raylab.backends.local import ray_start\n"
        "from ray._private import parameter\n"
        "ray_start._start_workers_with(ray_start.WORKER_MAIN)\n"
        "print(parameter.RayParams().worker_path)\n"
        "print(parameter.RayParams(worker_path='/own.py').worker_path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == [WORKER_MAIN, "/own.py"], done.stderr
