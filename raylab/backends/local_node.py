"""Supervisor of one local Ray node: `python -m raylab.backends.local_node TRIES -- ray start ...`.

`ray start` gives a raylet only 30 s to register with the GCS; on a loaded laptop a
node can miss that and exit. This re-runs a node that exits before it ever came up (at
most TRIES times), so `--workers 4` on two cores still comes up. A node that came up
and later exits is not restarted: that is a real failure the user must see. SIGTERM
(from `down`) ends this process at once; `ray start` gets the same signal through the
process group.
"""

from __future__ import annotations

import subprocess
import sys
import time

READY_TEXT = "Ray runtime started"


def main(argv: list[str]) -> int:
    tries, command = int(argv[0]), argv[argv.index("--") + 1 :]
    log = sys.stdout
    code = 1
    for attempt in range(1, tries + 1):
        started = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        came_up = False
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            came_up = came_up or READY_TEXT in line
            log.write(line)
            log.flush()
        code = proc.wait()
        if came_up or attempt == tries:
            break
        log.write(
            f"[raylab] the node exited with code {code} after {time.monotonic() - started:.0f} s "
            f"before it came up; starting it again ({attempt + 1}/{tries})\n"
        )
        log.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
