"""Attack: a symlink in the working dir that leads outside it ships what it points to.

Ray's own packer follows symlinks, and so did raylab's scan: `ln -s ~/.ssh/id_rsa key`
in a notebook's folder sent the key to the cluster with the working dir, and an export
copied it into a project meant to be committed. A real folder with real symlinks to a
file and a folder in another temporary folder: they are left out and listed, by the scan
(and in the excludes Ray gets: Ray's own packer, run here, leaves them out too) and by the
export (EXPORT.md lists them, the project holds none of their content); symlinks inside
the folder ship as before.
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from raylab.config import Settings
from raylab.export import export_notebook
from raylab.export.environment import carried
from raylab.model import ClusterEnvironment, ClusterInfo, Phase
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec
from raylab.sync.workdir import scan
from tests.export.support import make_notebook

SECRET = "ssh-rsa-private-key-material"


@pytest.fixture
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A working dir with symlinks in and out; out: a folder elsewhere, like /etc."""
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    (elsewhere / "hostname").write_text(SECRET)
    (elsewhere / "keys").mkdir()
    (elsewhere / "keys" / "id_rsa.py").write_text(f"KEY = {SECRET!r}\n")
    work = tmp_path_factory.mktemp("work")
    (work / "mylib").mkdir()
    (work / "mylib" / "__init__.py").write_text("")
    (work / "mylib" / "core.py").write_text("y = 2\n")
    (work / "train.py").write_text("x = 1\n")
    (work / "hostname").symlink_to(elsewhere / "hostname")  # a file outside
    (work / "keys").symlink_to(elsewhere / "keys")  # a folder outside
    (work / "mylib" / "leak.py").symlink_to(elsewhere / "keys" / "id_rsa.py")  # inside a package
    (work / "mylib" / "up.py").symlink_to(Path("..") / ".." / elsewhere.name / "hostname")
    (work / "gone").symlink_to(elsewhere / "missing")  # dangling, outside
    (work / "alias.py").symlink_to("train.py")  # inside: ships as before
    (work / "lib").symlink_to("mylib")  # a folder inside: ships twice, as Ray ships it
    (work / "again").symlink_to(".")  # a loop: Ray's walk would never end
    return work, elsewhere


OUTSIDE = ["gone", "hostname", "keys", "lib/leak.py", "lib/up.py", "mylib/leak.py",
           "mylib/up.py"]  # fmt: skip


def test_the_scan_leaves_out_and_lists_links_that_lead_outside(folders: tuple[Path, Path]) -> None:
    work, _ = folders
    result = scan(work)
    assert sorted(result.outside) == OUTSIDE
    assert sorted(rel for rel, _ in result.files) == [
        "alias.py", "lib/__init__.py", "lib/core.py", "mylib/__init__.py", "mylib/core.py",
        "train.py",
    ]  # fmt: skip
    assert result.loops == ("again",)
    note = result.outside_note()
    assert note is not None
    assert all(rel in note for rel in OUTSIDE[:5])


def test_rays_own_packer_leaves_them_out_with_the_scans_excludes(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    from ray._private.runtime_env.packaging import create_package

    work, _ = folders
    package = tmp_path / "working_dir.zip"
    create_package(str(work), package, include_gitignore=True, excludes=scan(work).ray_excludes())
    with zipfile.ZipFile(package) as zipped:
        names = zipped.namelist()
        content = b"".join(zipped.read(n) for n in names if not n.endswith("/"))
    assert {"train.py", "alias.py"} <= set(names)
    assert not [n for n in names if n.split("/")[0] in ("hostname", "keys", "gone", "again")]
    assert not [n for n in names if n.endswith(("leak.py", "up.py"))]
    assert SECRET.encode() not in content


def test_the_export_copies_none_of_it_and_says_so(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    work, _ = folders
    env = ClusterEnvironment(working_dir=str(work))
    c = carried(env, "nb", max_bytes=1 << 20)
    assert set(c.modules) == {"alias", "lib", "mylib", "train"}
    assert not [f for f in c.files if f.endswith(("leak.py", "up.py")) or "keys" in f]
    assert SECRET.encode() not in b"".join(c.files.values())

    spec = ClusterSpec.from_mapping({"name": "demo"}, Profiles())
    info = ClusterInfo(name="demo", owner="me", backend="local", phase=Phase.READY, spec=spec,
                       environment=env)  # fmt: skip
    nb = make_notebook(tmp_path / "nb.ipynb", ["import train\ntrain.x"])
    result = export_notebook(nb, settings=Settings.from_config(), cluster=info,
                             out_dir=tmp_path / "out")  # fmt: skip
    written = b"".join(p.read_bytes() for p in result.out_dir.rglob("*") if p.is_file())
    assert SECRET.encode() not in written
    report = (result.out_dir / "EXPORT.md").read_text()
    for rel in OUTSIDE:
        assert f"- Not carried: {rel} in the working directory, a symlink that leads" in report
    assert any("mylib/leak.py" in w for w in result.warnings)
