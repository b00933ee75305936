"""Turning `up`/`connect` options into Ray's runtime_env: contradictions, requirements
files, a remembered folder, env values; and Ray's own error text made one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from raylab.errors import SpecError
from raylab.model import ClusterEnvironment
from raylab.sync.errors import runtime_env_failure
from raylab.sync.runtime_env import EnvOptions, prepare


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
