"""Supervisor of one local Ray node:
`python -m raylab.backends.local.node TRIES AGENT_PORT [--needs|--after NODE] -- ray start ...`
where NODE is `PID:STARTED:LOG` of another node's supervisor (STARTED: `started`).

Three things make a node come up on a small, busy machine:

- The raylet waits for its dashboard agent to write the agent's HTTP port into the
  session folder, with a fixed 15 s limit that no setting changes, and aborts the node
  when it passes. The agent writes it only once it has imported Ray and loaded all its
  modules, which on two busy cores takes longer. raylab chose that port itself
  (`AGENT_PORT`, see ports.py): this writes it into the file as soon as the raylet
  exists, so the raylet waits for nothing; the agent comes up when it can.
- Workers start once the head is up (`--needs`): a head that has to be started again
  never strands workers joined to its first try. With `--after`, the command itself
  waits (raylab's `ray start` launcher, ray_start.py, told through AFTER_ENV): it loads
  Ray while the head starts, which on a small machine leaves a core idle, and starts
  the node the moment the head is up.
- `ray start` gives a raylet only 30 s to register with the GCS; a node that exits before
  it ever came up is run again (at most TRIES times). A node that came up and later exits
  is not restarted: that is a real failure the user must see.

SIGTERM (from `down`) ends this process at once; `ray start` gets the same signal through
the process group.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

READY_TEXT = "Ray runtime started"
# Ray 2.60's name for the file (ray._raylet.DASHBOARD_AGENT_LISTEN_PORT_NAME; a test
# checks they agree), not imported here: the supervisor stays free of Ray's imports.
AGENT_PORT_FILE = "dashboard_agent_listen_port"
RESTART_MARK = "[raylab] the node exited"
WAIT_MARK = "[raylab] not starting"
# The node its command waits for (`--after`), and the code it exits with when that node
# never came up: not a node that fell over, so not started again.
AFTER_ENV = "RAYLAB_START_AFTER"
NEVER_UP = 3


def node_ref(pid: int, started_at: float, log: str) -> str:
    """How one supervisor names another on its command line."""
    return f"{pid}:{started_at!r}:{log}"


def started(pid: int) -> float | None:
    """When process `pid` started, on a clock that no time step moves (None: it is gone).

    On Linux, seconds since boot (the starttime of /proc/PID/stat). psutil's create_time
    adds the boot time as the wall clock sees it at each call, so a clock step (NTP, a
    paused or forked VM) made a live node look like a stranger that had reused its pid,
    and its cluster Failed with nothing wrong. Elsewhere the creation time, which those
    kernels store once.
    """
    try:
        if sys.platform.startswith("linux"):
            with open(f"/proc/{pid}/stat", "rb") as fh:
                # The name in parentheses may hold spaces: count from after it.
                fields = fh.read().rpartition(b")")[2].split()
            return int(fields[19]) / os.sysconf("SC_CLK_TCK")
        return psutil.Process(pid).create_time()
    except (OSError, IndexError, ValueError, psutil.Error):
        return None


def same_process(pid: int, started_at: float) -> psutil.Process | None:
    """Process `pid` if it is the one that started at `started_at` (not a later one that
    reused the pid); a zombie included."""
    now = started(pid)
    if now is None or abs(now - started_at) > 0.5:
        return None
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def running(pid: int, started_at: float) -> bool:
    """Whether that process still runs (a zombie has ended)."""
    proc = same_process(pid, started_at)
    try:
        return proc is not None and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _is_up(log: str) -> bool:
    try:
        with open(log, errors="replace") as fh:
            return READY_TEXT in fh.read(256 * 1024)
    except OSError:
        return False


def wait_for(ref: str) -> bool:
    """Block until the node is up (True) or its supervisor has ended without (False)."""
    pid, created, log = ref.split(":", 2)
    while True:
        if _is_up(log):
            return True
        if not running(int(pid), float(created)):
            return _is_up(log)
        time.sleep(0.2)


def _raylet_args(proc: psutil.Process) -> dict[str, str] | None:
    """The raylet's `--flag=value` arguments, once `ray start` has started it."""
    try:
        for child in proc.children(recursive=True):
            argv = child.cmdline()
            if argv and argv[0].endswith("/raylet"):
                return dict(a[2:].split("=", 1) for a in argv[1:] if "=" in a)
    except psutil.Error:
        pass
    return None


def announce_agent_port(pid: int, port: int, done: threading.Event) -> None:
    """Write the agent's port where the raylet looks for it, as soon as the raylet runs."""
    try:
        proc = psutil.Process(pid)
    except psutil.Error:
        return
    while not done.wait(0.05):
        args = _raylet_args(proc)
        if args is None:
            continue
        folder, node = Path(args.get("session_dir", "")), args.get("node_id", "")
        if folder.is_dir() and node:
            target = folder / f"{AGENT_PORT_FILE}_{node}"
            if not target.exists():
                tmp = target.with_name(f".{target.name}.raylab")
                tmp.write_text(str(port))
                tmp.replace(target)  # whole or absent, never half-written
        return


def run_node(tries: int, agent_port: int, command: list[str], after: str | None = None) -> int:
    log = sys.stdout
    code = 1
    env = {**os.environ, AFTER_ENV: after} if after else None
    for attempt in range(1, tries + 1):
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
        done = threading.Event()
        threading.Thread(
            target=announce_agent_port, args=(proc.pid, agent_port, done), daemon=True
        ).start()
        came_up = False
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            came_up = came_up or READY_TEXT in line
            log.write(line)
            log.flush()
        code = proc.wait()
        done.set()
        if came_up or attempt == tries or (after and code == NEVER_UP):
            break
        log.write(
            f"{RESTART_MARK} with code {code} after {time.monotonic() - started:.0f} s "
            f"before it came up; starting it again ({attempt + 1}/{tries})\n"
        )
        log.flush()
    return code


def never_up() -> int:
    print(f"{WAIT_MARK}: the head never came up", flush=True)
    return NEVER_UP


def main(argv: list[str]) -> int:
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1 :]
    tries, agent_port = int(options[0]), int(options[1])
    order, ref = (options[2], options[3]) if len(options) >= 4 else ("", "")
    if order == "--needs" and not wait_for(ref):
        return never_up()
    return run_node(tries, agent_port, command, ref if order == "--after" else None)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
