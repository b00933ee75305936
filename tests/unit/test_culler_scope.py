"""`raylab culler`'s namespaces: --namespace or --all-namespaces, on KubeRay only; a
wrong combination is one line that says what to do, and nothing starts."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--backend", "local", "--all-namespaces"],
         "--namespace and --all-namespaces are for the KubeRay backend"),
        (["--backend", "kuberay", "-A", "--namespace", "team"],
         "--all-namespaces culls every namespace: leave out --namespace, or it"),
    ],
)  # fmt: skip
def test_a_wrong_scope_is_one_line(options: list[str], said: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "raylab.cli", "culler", "--once", *options],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode != 0, out
    assert said in out, out
    assert "Traceback" not in out, out
    assert "sweep" not in out, out  # nothing ran
