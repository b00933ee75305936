"""One failed test never fails the tests after it: a cluster a test leaves behind is
removed at once and that test errors, named; the next test starts clean.

Runs a small suite of its own in a separate pytest process with this suite's conftest;
the leaked "cluster" is a state-folder entry with no processes, which is what the
leftover check reads (the check itself deletes it through the real local backend).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

LEAKY_SUITE = """
import json, os
from pathlib import Path

def leak(name):
    folder = Path(os.environ["RAYLAB_STATE_DIR"]) / name
    folder.mkdir(parents=True)
    spec = {"name": name, "gpus": 0, "gpu_type": "cpu", "workers": 0, "cpus": "1",
            "memory": "1Gi", "image": None, "min_workers": None, "max_workers": None}
    state = {"spec": spec, "owner": "alice", "created": 0, "ray_version": "2.60.0",
             "python_version": "3.11", "ports": {}, "nodes": []}
    (folder / "cluster.json").write_text(json.dumps(state))

def test_fails_and_leaks():
    leak("leaked1")
    assert False, "a test failing half-way"

def test_after_it_starts_clean():
    assert not (Path(os.environ["RAYLAB_STATE_DIR"]) / "leaked1").exists()
"""


def test_a_leaking_test_errors_by_name_and_the_next_starts_clean(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parents[2]))
    pytester.makeconftest("pytest_plugins = ['tests.conftest']")
    pytester.makepyfile(test_leaky=LEAKY_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert (outcomes.get("failed"), outcomes.get("passed")) == (1, 1), result.stdout.str()
    assert outcomes.get("errors") == 1, result.stdout.str()
    leak = "test_leaky.py::test_fails_and_leaks left local clusters behind: ['leaked1']"
    assert leak in result.stdout.str()
