"""GPU-hours ledgers in the local backend's state folder, written as their user could
write them (culler/ledger_store.py: `<state folder>/usage/<user>.jsonl`), for the tests
that read them back through a door: the REST usage endpoint, the `usage` verb."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from raylab.identity import owner_label
from raylab.model import ClusterInfo

HOUR = 3600.0


def ledger_path(state_dir: Path, user: str) -> Path:
    return state_dir / "usage" / f"{owner_label(user)}.jsonl"


def interval(info: ClusterInfo | str, owner: str, gpus: int, start: float, end: float) -> Any:
    """One ledger line: of the cluster `info`, or of a deleted one whose uid is `info`."""
    uid, name = (info.uid, info.name) if isinstance(info, ClusterInfo) else (info, "gone")
    return {"uid": uid, "cluster": name, "owner": owner, "gpu_type": "a100", "gpus": gpus,
            "start": start, "end": end}  # fmt: skip


def write_ledger(state_dir: Path, user: str, intervals: list[Any]) -> Path:
    """What a user can do to their own ledger: write anything in it."""
    path = ledger_path(state_dir, user)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(i) + "\n" for i in intervals))
    return path


@contextlib.contextmanager
def ledgers_put_back(state_dir: Path, users: Iterable[str]) -> Iterator[None]:
    """The state folder is the whole session's: ledgers a module writes for its users
    would bill them in later modules (a server's usage of "bob" must start empty), so
    each is put back as it was, or removed."""
    paths = [ledger_path(state_dir, user) for user in users]
    before = {path: path.read_bytes() for path in paths if path.exists()}
    try:
        yield
    finally:
        for path in paths:
            if path in before:
                path.write_bytes(before[path])
            else:
                path.unlink(missing_ok=True)
