"""Print a benchmark table and write it as JSON: one shape for every bench script."""

from __future__ import annotations

import json
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    target: str
    anchor: float | None = None  # the same measure for the anchor, in the same run
    anchor_name: str = ""
    samples: list[float] = field(default_factory=list)
    anchor_samples: list[float] = field(default_factory=list)
    met: bool | None = None

    @property
    def ratio(self) -> float | None:
        return self.value / self.anchor if self.anchor else None


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def reported(name: str, samples: list[float], unit: str) -> Figure:
    """A figure without a target: its median, given for the record."""
    return Figure(name=name, value=median(samples), unit=unit, target="reported",
                  samples=samples, met=None)  # fmt: skip


def p95(xs: list[float]) -> float:
    if not xs:
        return float("nan")
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def emit(title: str, figures: list[Figure], out_name: str) -> Path:
    rows = [("figure", "value", "anchor", "ratio", "target", "met")]
    for f in figures:
        rows.append(
            (
                f.name,
                f"{f.value:.3g} {f.unit}",
                f"{f.anchor:.3g} {f.unit} ({f.anchor_name})" if f.anchor is not None else "—",
                f"{f.ratio:.2f}×" if f.ratio is not None else "—",
                f.target,
                {True: "yes", False: "NO", None: "—"}[f.met],
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    print(f"\n{title}")
    for i, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{out_name}.json"
    payload = {
        "title": title,
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"cpus": __import__("os").cpu_count(), "python": platform.python_version()},
        "figures": [{**asdict(f), "ratio": f.ratio} for f in figures],
    }
    path.write_text(json.dumps(payload, indent=1))
    print(
        f"(written to {path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path})"
    )
    return path
