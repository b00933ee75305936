"""Bad `%raycluster` input: one clear line, no traceback, nothing created.

Runs the real magic in a real IPython shell; no Ray process is started because every
line here is refused before anything is created.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell


@pytest.fixture(scope="module")
def shell() -> InteractiveShell:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raylab")
    return ip


CASES = [
    ("", "a verb is required; choose one of: up, down, list"),
    ("frobnicate", "unknown verb 'frobnicate'; choose one of: up, down, list"),
    ("up --gpu 4", "unknown option --gpu; did you mean --gpus?"),
    ("up --gpus -1", "--gpus: '-1' is not a whole number; use 0 to 1024"),
    ("up --gpus 2.5", "--gpus: '2.5' is not a whole number"),
    ("up --gpus many", "--gpus: 'many' is not a whole number"),
    ("up --gpus 99999999999", "--gpus: 99999999999 is out of range"),
    ("up --gpus 3 --workers 2", "--gpus: 3 GPUs cannot be split evenly across 2 workers"),
    ("up --gpus 2 --memory 64GB", "--memory: '64GB' is not a quantity such as 64Gi"),
    ("up --gpus 2 --gpu-type v100", "--gpu-type: unknown GPU type 'v100'; choose one of:"),
    ("up --name Bad_Name", "--name: 'Bad_Name' is not a valid name"),
    ("up --name " + "a" * 41, "is longer than 40 characters"),
    ("up --timeout soon", "argument --timeout: 'soon' is not a number of seconds"),
    ("up --name 'unbalanced", "cannot parse the line: No closing quotation"),
    ("down", "the following arguments are required: NAME"),
    ("down nosuch", "no cluster named 'nosuch'"),
    ("status nosuch", "no cluster named 'nosuch'"),
    ("scale nosuch --workers 2", "no cluster named 'nosuch'"),
    ("logs 'x;rm -rf /'", "--name: 'x;rm -rf /' is not a valid name"),
    ("up --backend nomad", "argument --backend: invalid choice: 'nomad'"),
    # Accepted and ignored would be worse: the local backend never autoscales.
    (
        "up --backend local --gpus 2 --min-workers 0 --max-workers 2",
        "--min-workers: the local backend does not autoscale; give --workers N, or use "
        "--backend kuberay",
    ),
]


@pytest.mark.parametrize(("line", "message"), CASES)
def test_refused_with_one_clear_line(
    shell: InteractiveShell, state_dir: Path, line: str, message: str
) -> None:
    with pytest.raises(UsageError) as err:
        shell.run_line_magic("raycluster", line)
    assert message in str(err.value)
    assert "Traceback" not in str(err.value)
    assert not any(state_dir.glob("*/cluster.json")), "a refused line created a cluster"


def test_in_a_cell_the_user_sees_no_traceback(
    shell: InteractiveShell, capsys: pytest.CaptureFixture[str]
) -> None:
    result = shell.run_cell("%raycluster up --gpus 3 --workers 2")
    out = capsys.readouterr()
    shown = out.out + out.err
    assert not result.success
    assert "UsageError: --gpus: 3 GPUs cannot be split evenly across 2 workers" in shown
    assert "Traceback" not in shown


def test_help_lists_the_verbs(shell: InteractiveShell, capsys: pytest.CaptureFixture[str]) -> None:
    shell.run_line_magic("raycluster", "--help")
    text = capsys.readouterr().out
    for verb in ("up", "down", "list", "status", "connect", "disconnect", "scale", "logs"):
        assert verb in text
    shell.run_line_magic("raycluster", "up --help")
    assert "--gpu-type" in capsys.readouterr().out
