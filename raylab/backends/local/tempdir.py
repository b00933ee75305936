"""The folder under which local nodes keep Ray's temp dirs: private to this OS user.

Ray makes its session, log and socket folders world-writable (0777) under whatever temp
dir it is given, so the folder above them is what keeps other users of the machine out
of a cluster's sockets and logs (which can hold a job's environment). It lives in the
shared /tmp, where anyone may have made it first: raylab makes it 0700 itself and uses
it only when it is a real folder that this user owns.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from ...errors import BackendUnavailable


def private_temp_root() -> Path:
    """`<tmp>/raylab-<uid>`, made 0700 by raylab if missing; refused (one line) when it
    is a link, not a folder, or another user's."""
    root = Path(tempfile.gettempdir()) / f"raylab-{os.getuid()}"
    try:
        root.mkdir(mode=0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise BackendUnavailable(
            f"cannot make Ray's temp folder {root}: {exc.strerror}",
            detail="check that the temp folder (TMPDIR) is writable",
        ) from exc
    st = root.lstat()
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
        what = (
            "is a link or a file, not a folder of yours"
            if not stat.S_ISDIR(st.st_mode)
            else f"belongs to uid {st.st_uid}, not to you (uid {os.getuid()})"
        )
        raise BackendUnavailable(
            f"Ray's temp folder {root} {what}: raylab will not start Ray there",
            detail="remove it (someone else may have made it to read your clusters' "
            "sockets and logs), or point TMPDIR at a folder of your own",
        )
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(root, 0o700)  # ours, made by an older raylab with the default mode
    return root


def is_inside(path: str | Path, root: Path) -> bool:
    """Whether `path` is strictly inside `root` (no `..` tricks, links not followed)."""
    resolved = Path(os.path.abspath(path))
    return resolved != root and resolved.is_relative_to(root)
