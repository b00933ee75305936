"""How long each start-up phase took in the last starts here, by backend and GPU type: a
small JSON file in the user's Jupyter data folder, written under a lock."""

from __future__ import annotations

import json
import logging
import statistics
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

log = logging.getLogger(__name__)
KEEP = 10  # the last starts remembered per phase: "usually" moves with the machine
LOCK_TIMEOUT_S = 2.0  # a history is a nicety: never a reason to wait


def default_path() -> Path:
    from jupyter_core.paths import jupyter_data_dir

    return Path(jupyter_data_dir()) / "raylab" / "startup-phases.json"


class PhaseHistory:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_path()

    def usual(self, key: str, phase: str) -> float | None:
        """The median of the last durations (s) of `phase` for `key`; None if none."""
        seen = self._read().get(key, {}).get(phase) or []
        return statistics.median(seen) if seen else None

    def record(self, key: str, phase: str, seconds: float) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(self.path.with_suffix(".lock"), timeout=LOCK_TIMEOUT_S):
                data = self._read()
                seen = [*data.setdefault(key, {}).get(phase, []), round(seconds, 2)]
                data[key][phase] = seen[-KEEP:]
                tmp = self.path.with_suffix(".tmp")
                tmp.write_text(json.dumps(data, indent=1))
                tmp.replace(self.path)
        except (OSError, Timeout) as exc:
            log.debug("raylab: start-up history not written: %s", exc)

    def _read(self) -> dict[str, dict[str, list[float]]]:
        try:
            data: Any = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        # Only what this file should hold: numbers by phase by key (it may be edited).
        return {
            str(k): {
                str(p): [float(x) for x in v if isinstance(x, int | float) and 0 <= x < 1e6]
                for p, v in phases.items()
                if isinstance(v, list)
            }
            for k, phases in data.items()
            if isinstance(phases, dict)
        }
