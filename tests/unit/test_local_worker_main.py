"""A local cluster's workers start with worker_setup.py (their runtime env applied as Ray's
setup_worker.py applies it, without importing Ray), then run worker_main.py (Ray's
default_worker.py, once what a worker's first task would load is loaded).
tests/local/test_driver.py and test_runtime_env.py drive both in a cluster."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from raylab.backends.local.ray_start import WORKER_MAIN, WORKER_SETUP

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
        "ray_start._start_workers_with(ray_start.WORKER_SETUP, ray_start.WORKER_MAIN)\n"
        "print(parameter.RayParams().setup_worker_path, parameter.RayParams().worker_path)\n"
        "print(parameter.RayParams(worker_path='/own.py').worker_path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert done.stdout.split() == [WORKER_SETUP, WORKER_MAIN, "/own.py"], done.stderr


SHOW = """
import os, sys
print("CWD", os.getcwd())
print("ARGV", sys.argv[1:])
print("EXE", sys.executable)
print("VARS", os.environ.get("A_VAR"), os.environ.get("B_VAR"), os.environ.get("C_VAR"))
"""


def set_up(
    *args: str, language: str = "PYTHON", context: str = "{}", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The set-up as the raylet runs it: the worker's command, then Ray's two options."""
    return subprocess.run(
        [sys.executable, WORKER_SETUP, *args, f"--language={language}",
         f"--serialized-runtime-env-context={context}"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


def shown(tmp_path: Path, context: dict[str, object], *args: str) -> str:
    """What SHOW prints, run as a worker through the set-up with `context`."""
    script = tmp_path / "show.py"
    script.write_text(SHOW)
    env = {"PATH": "/usr/bin:/bin", "HOME": "/home/someone"}
    done = set_up(str(script), *args, context=json.dumps(context), env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_set_up_applies_the_runtime_env_as_rays_does(tmp_path: Path) -> None:
    """Its variables (`${X}` from the environment, an unknown one empty), its command
    prefix (working_dir's `cd DIR &&`), its Python; the worker's own arguments as given,
    quotes and spaces included."""
    work = tmp_path / "a dir"
    work.mkdir()
    context = {
        "env_vars": {"A_VAR": "${HOME}/x", "B_VAR": "${NOT_SET}y", "C_VAR": "it's"},
        "command_prefix": ["cd", shlex.quote(str(work)), "&&"],
        "py_executable": sys.executable,
    }
    out = shown(tmp_path, context, "--flag=a b", "--quote='q'")
    assert f"CWD {work}" in out
    assert "ARGV ['--flag=a b', \"--quote='q'\"]" in out
    assert f"EXE {sys.executable}" in out
    assert "VARS /home/someone/x y it's" in out


def test_an_empty_context_runs_the_worker_with_this_python(tmp_path: Path) -> None:
    out = shown(tmp_path, {})
    assert f"EXE {sys.executable}" in out
    assert "VARS None None None" in out


def test_a_worker_of_another_language_is_handed_to_rays_own_set_up() -> None:
    """Ray's setup_worker.py execs a C++ worker's command as given."""
    done = set_up("/bin/echo", "handed over", language="CPP")
    assert done.stdout == "handed over\n", done.stderr


def test_a_runtime_env_it_does_not_know_is_handed_to_rays_own_set_up() -> None:
    """A context with a field this Ray's RuntimeEnvContext lacks (a later Ray's): Ray's
    own set-up reads it, here refusing it, instead of the field being ignored."""
    done = set_up("/bin/echo", "ran", context='{"a_later_field": 1}')
    assert "ran" not in done.stdout
    assert "unexpected keyword argument 'a_later_field'" in done.stderr
