"""The end of a local standby cluster, kept by a small process of its own.

A standby is deleted when its time is up and nobody claimed it (raylab/standby). The
Jupyter server that made it deletes it when it stops, but a server that dies, or a
machine with no server at all, would leave its Ray processes running; so each standby
gets this process, in a session of its own, which deletes it at its time if it is still
a standby, and ends as soon as it is claimed or gone.

    python -m raylab.backends.local.standby_reaper STATE_DIR NAME UID

(started by processes.start_reaper).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

POLL_S = 1.0  # a claim ends it within this; the read is one small file


def reap(state_dir: Path, name: str, uid: str) -> bool:
    """Wait until the standby's time, then delete it if it is still that standby.
    True when it was deleted here."""
    from .backend import LocalBackend

    backend = LocalBackend(state_dir)
    while True:
        info = backend.get(name)
        if info is None or info.uid != uid or info.standby_until is None:
            return False  # gone, replaced under the same name, or claimed
        if time.time() >= info.standby_until:
            return backend.retire_standby(name)
        time.sleep(min(POLL_S, max(0.0, info.standby_until - time.time())))


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m raylab.backends.local.standby_reaper STATE_DIR NAME UID")
        return 2
    reap(Path(argv[0]), argv[1], argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
