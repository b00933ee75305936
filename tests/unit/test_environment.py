"""The cluster environment's pieces that need no cluster: the file list Ray ships, sizes and
wording, option parsing, Ray's error text, the RayCluster annotation, drift lines."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylab import render
from raylab.backends.kuberay_status import cluster_info
from raylab.drift import differences, imported_modules
from raylab.env_values import parse_env
from raylab.environment import ANNOTATION, ClusterEnvironment
from raylab.errors import SpecError
from raylab.kernel_packages import requirement_name
from raylab.kernel_pip import PipFailed, parse_install, pip_lines
from raylab.render import format_size
from raylab.runtime_env import EnvOptions, prepare
from raylab.runtime_env_errors import runtime_env_failure
from raylab.workdir import scan


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1280, "1.3 KiB"),  # half up, as render.ts does (Python's format would say 1.2)
        (int(3.2 * 2**20), "3.2 MiB"),
        (2**20 - 50, "1.0 MiB"),  # never "1024.0 KiB"
        (100 * 2**20, "100.0 MiB"),
        (5 * 2**30, "5.0 GiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_environment_summary_wording() -> None:
    env = ClusterEnvironment(
        working_dir="/nb", working_dir_bytes=int(3.2 * 2**20), pip=("a", "b", "c", "d"),
        env_names=("X", "Y"),
    )  # fmt: skip
    assert render.environment_text(env) == "working dir 3.2 MiB · 4 pip packages · 2 env vars"
    one = ClusterEnvironment(pip=("a",), env_names=("X",), local_packages=("p",))
    assert render.environment_text(one) == "1 local package · 1 pip package · 1 env var"
    assert render.environment_text(ClusterEnvironment()) == "nothing synced"


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


def test_prepare_refuses_contradictions_and_reads_requirements(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="contradict"):
        prepare(EnvOptions(working_dir=".", no_sync=True), None, cwd=tmp_path, max_bytes=1 << 20)
    (tmp_path / "req.txt").write_text("# pinned\nnumpy>=2  # arrays\n\nrequests==2.32.3\n")
    ready = prepare(
        EnvOptions(requirements="req.txt", no_sync=True), None, cwd=tmp_path, max_bytes=1 << 20
    )
    assert ready.environment.pip == ("numpy>=2", "requests==2.32.3")
    assert ready.runtime_env["pip"] == ["numpy>=2", "requests==2.32.3"]
    assert "working_dir" not in ready.runtime_env
    (tmp_path / "opts.txt").write_text("--index-url http://x\n")
    with pytest.raises(SpecError, match="is a pip option"):
        prepare(EnvOptions(requirements="opts.txt"), None, cwd=tmp_path, max_bytes=1 << 20)


def test_a_remembered_folder_missing_here_is_a_warning_not_a_failure(tmp_path: Path) -> None:
    """A kernel on another machine (another pod) connects without the owner's folder."""
    remembered = ClusterEnvironment(working_dir="/nowhere/nb", env_names=("TOKEN",))
    ready = prepare(EnvOptions(), remembered, cwd=tmp_path, max_bytes=1 << 20)
    assert "working_dir" not in ready.runtime_env
    assert ready.environment.working_dir == "/nowhere/nb"  # still the cluster's, for its owner
    assert ready.warnings == [
        "the cluster's working directory /nowhere/nb is not on this machine; connected "
        "without it (--working-dir PATH ships another)",
        "no value on this machine for TOKEN: connect with --env TOKEN=VALUE to set them again",
    ]


def test_values_are_in_the_runtime_env_but_not_in_the_environment(tmp_path: Path) -> None:
    ready = prepare(EnvOptions(env=("A=1", "B=two words")), None, cwd=tmp_path, max_bytes=1 << 20)
    assert ready.runtime_env["env_vars"] == {"A": "1", "B": "two words"}
    assert ready.environment.env_names == ("A", "B")
    assert "two words" not in ready.environment.to_annotation()


def test_parse_env() -> None:
    assert parse_env(["A=1", "B==x", "C="], {}) == {"A": "1", "B": "=x", "C": ""}
    assert parse_env(["HOME_DIR"], {"HOME_DIR": "/h"}) == {"HOME_DIR": "/h"}
    refused = [
        ("=x", "not a variable name"),
        ("A-B=1", "not a variable name"),
        ("UNSET", "has no value"),
        ("PYTHONPATH=/x", "set by raylab and Ray"),
    ]
    for bad, why in refused:
        with pytest.raises(SpecError, match=why):
            parse_env([bad], {})


def test_pip_install_arguments() -> None:
    parsed = parse_install(["-U", "torch==2.5", "--index-url", "http://i", "./dist/x.whl",
                            "-e", "../mylib", "numpy"])  # fmt: skip
    assert parsed.index == ("torch==2.5", "numpy")
    assert parsed.local == ("./dist/x.whl", "../mylib")
    with pytest.raises(PipFailed, match="at least one package"):
        parse_install(["-U"])
    assert pip_lines("x = 1\n%pip install -q a b  # why\n!pip install c\n") == [
        ["-q", "a", "b"],
        ["c"],
    ]
    assert requirement_name("My_Lib[extra]>=1") == "my-lib"
    assert requirement_name("./x.whl") is None


def test_ray_runtime_env_failure_becomes_one_line() -> None:
    text = (
        "Initialization failure from server:\nTraceback (most recent call last):\n"
        '  File "proxier.py", line 303, in _create_runtime_env\n    raise RuntimeError(\n'
        "RuntimeError: Failed to create runtime_env for Ray client server, it is caused by:\n"
        "ray._private.runtime_env.utils.SubprocessCalledProcessError: Run cmd[9] failed.\n"
        "Last 50 lines of stdout:\n    ERROR: Could not find a version that satisfies the "
        "requirement nosuchpkg (from versions: none)\n"
    )
    assert runtime_env_failure(text) == (
        "pip: Could not find a version that satisfies the requirement nosuchpkg "
        "(from versions: none)"
    )
    assert runtime_env_failure("Connection refused") is None


def test_the_raycluster_annotation_is_read_back() -> None:
    env = ClusterEnvironment(working_dir="/home/u/nb", working_dir_bytes=5, pip=("x",),
                             env_names=("TOKEN",))  # fmt: skip
    obj = {
        "metadata": {"name": "c1", "namespace": "ml",
                     "annotations": {ANNOTATION: env.to_annotation()}},
        "spec": {"workerGroupSpecs": [{"replicas": 1}]},
    }  # fmt: skip
    assert cluster_info(obj).environment == env
    obj["metadata"]["annotations"][ANNOTATION] = "{not json"  # type: ignore[index]
    assert cluster_info(obj).environment is None


def test_drift_lines() -> None:
    cells = ["import numpy as np\n%time x = 1", "from torch.nn import X", "from . import y"]
    assert imported_modules([*cells, "import os.path"]) == {"numpy", "torch", "os"}
    lines = differences(
        {"numpy": "1.26.4", "torch": "2.5.1", "pandas": "2.2.0", "gone": "1.0"},
        {"numpy": "2.1.0", "torch": "2.5.0", "pandas": "2.2.3", "gone": None},
    )
    assert lines == [
        "numpy 1.26.4 in this kernel, 2.1.0 on the cluster: objects passed between them may "
        "not load; install the same version on both (`%raycluster pip install numpy==1.26.4`)"
    ]


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
