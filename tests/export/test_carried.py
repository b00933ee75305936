"""What an export carries from the cluster's environment: the notebook's own modules."""

from __future__ import annotations

from pathlib import Path

from raylab.model import ClusterEnvironment


def test_the_export_carries_the_notebooks_modules_only(tmp_path: Path) -> None:
    from raylab.export.environment import carried

    for rel in ("mylib/__init__.py", "mylib/data.json", "helpers.py", "tests/__init__.py",
                "raylab/__init__.py", "conftest.py", "data/x.csv", "nb/__init__.py",
                "scripts/run.py", ".venv/pyvenv.cfg"):  # fmt: skip
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x = 1\n")
    env = ClusterEnvironment(working_dir=str(tmp_path), pip=("numpy>=2",), env_names=("T",))
    c = carried(env, "nb", max_bytes=1 << 20)
    assert c.modules == ("helpers", "mylib")
    assert sorted(c.files) == ["helpers.py", "mylib/__init__.py", "mylib/data.json"]
    assert (c.package_modules, c.file_modules) == (["mylib"], ["helpers.py"])
    assert (c.requirements, c.env_names) == (("numpy>=2",), ("T",))
    assert [n.split(" has ")[0] for n in c.notes] == ["module nb", "module tests"]
