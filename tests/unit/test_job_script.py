"""A cell -> the script its Ray job runs: what earlier cells it brings, what it refuses,
and that the script runs (here, in a plain Python process, with no cluster: the cell's
code, its definitions and its value's round trip through the log lines)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from raylab.jobs.errors import JobError
from raylab.jobs.result import is_result_line, read_result
from raylab.jobs.script import build

EARLIER = [
    "import math\nimport numpy as np\n",
    "N = 4\nSCALE: float = 2.5\n",
    "@staticmethod\ndef unused():\n    return 0\n",
    "def square(x):\n    return x * x\n\n\n"
    "def total(n):\n    return sum(square(i) for i in range(n))\n",
    "data = list(range(N))\n",
    "get_ipython().run_line_magic('raycluster', 'up --name c')\n",
    "def broken(:\n",
]


def run_script(source: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", source], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_cell_gets_what_it_uses_from_earlier_cells_and_its_value_comes_back() -> None:
    script = build("print(total(N))\nmath.floor(SCALE * total(N))", EARLIER, "n1")
    assert script.brought == ("N", "SCALE", "math", "square", "total")
    assert script.returns
    assert "unused" not in script.source
    assert "np" not in script.brought
    done = run_script(script.source)
    assert done.returncode == 0, done.stderr
    shown = [x for x in done.stdout.splitlines() if not is_result_line(x)]
    assert shown == ["14"]
    assert read_result(done.stdout, "n1", "j") == 35


def test_a_later_definition_wins_and_a_semicolon_hides_the_value() -> None:
    script = build("square(3);", [*EARLIER, "def square(x):\n    return -x\n"], "n2")
    assert not script.returns
    done = run_script(script.source + "\nprint(square(3))")
    assert done.stdout.split() == ["-3"]
    assert not any(is_result_line(x) for x in done.stdout.splitlines())


def test_a_name_an_earlier_cell_computed_is_refused_with_the_cell() -> None:
    with pytest.raises(JobError) as e:
        build("sum(data)", EARLIER, "n3")
    assert "'data', which cell 5 computed in this kernel" in e.value.message
    assert "literal constants" in (e.value.detail or "")


def test_a_name_defined_nowhere_is_refused() -> None:
    with pytest.raises(JobError) as e:
        build("train(model)", EARLIER, "n4")
    said = "the cell uses 'model', 'train', defined nowhere in this notebook's cells"
    assert e.value.message == said


@pytest.mark.parametrize(
    ("cell", "says"),
    [
        ("x = 1\n!ls\n", "line 2: magics and shell lines"),
        ("%time x = 1\n", "line 1: magics and shell lines"),
        ("def f(:\n", "<cell>, line 1: "),
        ("\n\n", "the cell is empty"),
    ],
)
def test_cells_a_job_cannot_run_are_refused(cell: str, says: str) -> None:
    with pytest.raises(JobError) as e:
        build(cell, [], "n5")
    assert says in e.value.message


def test_the_cell_text_cannot_break_out_of_its_string() -> None:
    cell = "s = '''\\n\"\"\"''' + \"')\\n\" + '\\x00'\nprint(len(s), repr(s[-1]))\n"
    script = build(cell, ["T = '\"\"\"\\'\\'\\''\n"], "n6")
    done = run_script(script.source)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["8", "'\\x00'"]


def test_a_traceback_shows_the_cells_own_line() -> None:
    script = build("x = 1\nraise ValueError(f'bad {x}')\n", [], "n7", "<job j: a.ipynb, In [3]>")
    done = run_script(script.source)
    assert done.returncode == 1
    assert 'File "<job j: a.ipynb, In [3]>", line 2' in done.stderr
    assert "raise ValueError(f'bad {x}')" in done.stderr
    assert done.stderr.strip().endswith("ValueError: bad 1")
    assert "_raylab_run" not in done.stderr


def test_a_value_too_large_fails_the_job_with_the_limit() -> None:
    script = build("b'x' * (9 * 2**20)", [], "n8")
    done = run_script(script.source)
    assert done.returncode == 1
    assert "the cell's value is 9.0 MiB pickled; a job's result may be at most 8 MiB" in done.stderr
    assert not any(is_result_line(x) for x in done.stdout.splitlines())


def test_a_damaged_or_missing_result_says_so() -> None:
    script = build("[1, 2]", [], "n9")
    log = run_script(script.source).stdout
    assert read_result(log, "n9", "j") == [1, 2]
    with pytest.raises(JobError, match="left no result"):
        read_result(log, "other", "j")
    damaged = log.replace("RAYLAB-RESULT n9 0 ", "RAYLAB-RESULT n9 0 AAAA")
    with pytest.raises(JobError, match="incomplete or damaged"):
        read_result(damaged, "n9", "j")
