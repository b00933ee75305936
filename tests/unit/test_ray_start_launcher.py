"""Local nodes run Ray's own `ray start` through a launcher that skips the command groups
it never uses (backends/local/ray_start.py): the same command, a third of the CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from raylab.backends.local.backend import LocalBackend
from raylab.backends.local.node import NEVER_UP, RESTART_MARK, WAIT_MARK, node_ref, started
from raylab.backends.local.ray_start import MODULE, quick_ray_start

PROBE = """
import sys
from raylab.backends.local.ray_start import main
try:
    main(sys.argv[1:])
except SystemExit as exit:
    print("EXIT", exit.code)
print("LOADED", sorted(m for m in ("ray.serve", "pandas", "fastapi") if m in sys.modules))
"""


def run(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120
    )
    return done.stdout + done.stderr


def test_it_is_rays_start_command_without_serve_or_the_jobs_cli() -> None:
    out = run("--help")
    assert "Usage: ray start [OPTIONS]" in out
    assert "--dashboard-agent-listen-port" in out
    assert "EXIT 0" in out
    assert "LOADED []" in out


def test_a_wrong_option_fails_as_ray_start_does() -> None:
    out = run("--no-such-option")
    assert "No such option '--no-such-option'" in out
    assert "EXIT 2" in out


def test_the_backend_uses_it_where_this_python_has_ray(tmp_path: Path) -> None:
    assert LocalBackend(tmp_path).ray_start == [sys.executable, "-m", MODULE]
    # A `ray` command given (tests give a broken one) is run as given.
    assert LocalBackend(tmp_path, ray_executable="/x/ray").ray_start == ["/x/ray", "start"]


def test_a_worker_whose_head_never_came_up_is_not_started_nor_started_again(
    tmp_path: Path,
) -> None:
    """`--after HEAD`: the launcher loads Ray, then waits for the head; a head whose
    supervisor ended without coming up ends the worker at once, with one line, and its
    supervisor does not try it again (it did not fall over: it had nothing to join)."""
    head_log = tmp_path / "head.log"
    head_log.write_text("the head failed\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    at = started(gone.pid)
    gone.wait()
    assert at is not None
    supervisor = [sys.executable, "-m", "raylab.backends.local.node", "3", "1"]
    done = subprocess.run(
        [*supervisor, "--after", node_ref(gone.pid, at, str(head_log)), "--",
         *(quick_ray_start() or []), "--address=127.0.0.1:1", "--block"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == NEVER_UP, done.stdout + done.stderr
    assert done.stdout.count(f"{WAIT_MARK}: the head never came up") == 1
    assert RESTART_MARK not in done.stdout
    assert "Ray runtime started" not in done.stdout
