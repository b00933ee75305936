"""The file list Ray ships from a working dir: what its ignore rules leave out."""

from __future__ import annotations

from pathlib import Path

from raylab.sync.workdir import scan


def _tree(root: Path) -> None:
    files = {
        "a.py": "", "data/x.csv": "1", ".gitignore": "*.log\n/build/\n!keep.log\n",
        "keep.log": "", "drop.log": "", "build/out.o": "", "src/build/ok.py": "",
        ".rayignore": "data/big/\n", "data/big/blob": "x", "sub/.gitignore": "local.txt\n",
        "sub/local.txt": "", "sub/deep/local.txt": "", "local.txt": "", "we[ird]/f.py": "",
        "node_modules/m.js": "", ".git/HEAD": "", "myenv/pyvenv.cfg": "", "myenv/lib/x.py": "",
        "ckpt/e1.pt": "", "__pycache__/a.pyc": "",
    }  # fmt: skip
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_scan_lists_what_ray_itself_packs(tmp_path: Path) -> None:
    """Parity with Ray's own walk (the one that zips the working_dir), given our excludes."""
    from ray._private.runtime_env.packaging import _dir_travel, _get_excludes

    _tree(tmp_path)
    result = scan(tmp_path, ["ckpt/"])
    ours = {rel for rel, _ in result.files}
    assert ours == {
        "a.py", "data/x.csv", ".gitignore", "keep.log", "src/build/ok.py", ".rayignore",
        "sub/.gitignore", "local.txt", "we[ird]/f.py",
    }  # fmt: skip
    assert result.environments == ("myenv",)
    theirs: set[str] = set()

    def handler(path: Path) -> None:
        if path.is_file():
            theirs.add(path.relative_to(tmp_path).as_posix())

    excludes = [_get_excludes(tmp_path, result.ray_excludes())]
    _dir_travel(tmp_path, excludes, handler, include_gitignore=True)
    assert theirs == ours
