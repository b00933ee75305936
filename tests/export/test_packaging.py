"""The project templates ship inside raylab's wheel (the export reads them as package data)."""

from __future__ import annotations

from pathlib import Path

from hatchling.builders.wheel import WheelBuilder

ROOT = Path(__file__).resolve().parents[2]
TEMPLATES = ROOT / "raylab" / "export" / "templates"


def test_wheel_includes_every_template() -> None:
    shipped = {f.distribution_path for f in WheelBuilder(str(ROOT)).recurse_included_files()}
    templates = {f"raylab/export/templates/{p.name}" for p in TEMPLATES.glob("*.j2")}
    assert len(templates) == 7
    assert templates <= shipped
