"""Attack: a secret the notebook writes into its environment is copied into the pipeline.

Only `os.environ["K"] = "literal"` was left out of the exported code; every other way of
writing a value into the environment (update, setdefault, f-strings and expressions,
chained assignments, putenv, the `%env` magic, aliases of os and environ) was copied
into the project, which is meant to be committed and shared. Each form is exported for
real: the value appears in no file of the written project, and EXPORT.md lists the
variable as left out (so that it is set where the pipeline runs).
"""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from raylab.config import Settings
from raylab.export import export_notebook
from tests.export.support import make_notebook

SETTINGS = Settings.from_config()
NAME = "API_KEY"
# (a cell that writes a secret into the variable K, the secret)
FORMS = [
    ("import os\nos.environ['K'] = 'sk-plain-literal'", "sk-plain-literal"),
    ("import os\nos.environ.update({'K': 'sk-update-dict'})", "sk-update-dict"),
    ("import os\nos.environ.update(K='sk-update-keyword')", "sk-update-keyword"),
    ("import os\nos.environ.update([('K', 'sk-update-pairs')])", "sk-update-pairs"),
    ("import os\nos.environ.setdefault('K', 'sk-setdefault')", "sk-setdefault"),
    ("import os\nos.environ.__setitem__('K', 'sk-dunder')", "sk-dunder"),
    ("import os\nuser = 'me'\nos.environ['K'] = f'sk-fstring-{user}'", "sk-fstring-"),
    ("import os\nos.environ['K'] = 'sk-half-' + 'and-half'.upper()", "sk-half-"),
    ("import os\nos.environ['K'] = str(8675309)", "8675309"),
    ("import os\ncopy = os.environ['K'] = 'sk-chained'", "sk-chained"),
    ("import os\nos.environ['K'], n = 'sk-tuple-target', 1", "sk-tuple-target"),
    ("import os\nos.environ['K'] += 'sk-augmented'", "sk-augmented"),
    ("import os\nos.environ |= {'K': 'sk-merged'}", "sk-merged"),
    ("import os\nos.environb[b'K'] = b'sk-bytes'", "sk-bytes"),
    ("import os\nos.putenv('K', 'sk-putenv')", "sk-putenv"),
    ("import os as o\no.environ['K'] = 'sk-os-alias'", "sk-os-alias"),
    ("from os import environ\nenviron['K'] = 'sk-from-import'", "sk-from-import"),
    ("from os import environ as env\nenv['K'] = 'sk-environ-alias'", "sk-environ-alias"),
    ("from os import putenv as put\nput('K', 'sk-putenv-alias')", "sk-putenv-alias"),
    ("import os\nprint(os.environ.setdefault('K', 'sk-in-a-call'))", "sk-in-a-call"),
    ("import os\nif True:\n    os.environ.update(K='sk-nested')", "sk-nested"),
    ("import os\ndef f():\n    os.environ['K'] = 'sk-in-a-def'\nf()", "sk-in-a-def"),
    ("%env K=sk-env-magic", "sk-env-magic"),
    ("%set_env K sk-set-env-magic", "sk-set-env-magic"),
]


def written(project: Path) -> str:
    return "\n".join(p.read_bytes().decode(errors="replace") for p in project.rglob("*")
                     if p.is_file())  # fmt: skip


def export(tmp_path: Path, cell: str) -> tuple[str, str, str]:
    """(every file of the project, EXPORT.md's lines of what was left out, cluster.py)."""
    nb = make_notebook(tmp_path / "nb.ipynb", [cell, "x = 1\nx"])
    out = export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out").out_dir
    report = (out / "EXPORT.md").read_text()
    left_out = "\n".join(line for line in report.splitlines() if "| dropped |" in line)
    return written(out), left_out, (out / "nb" / "cluster.py").read_text()


@pytest.mark.parametrize(("cell", "secret"), FORMS, ids=[f[1] for f in FORMS])
def test_a_value_written_into_the_environment_is_left_out_and_listed(
    tmp_path: Path, cell: str, secret: str
) -> None:
    files, left_out, cluster = export(tmp_path, cell.replace("K", NAME))
    assert secret not in files
    assert f"set {NAME} where the pipeline runs" in left_out, left_out
    assert f'ENV_VARS = ["{NAME}"]' in cluster  # forwarded by name from where it runs


def test_a_variable_named_at_run_time_is_left_out_too(tmp_path: Path) -> None:
    files, left_out, _ = export(tmp_path, "import os\nkey = 'A'\nos.environ[key] = 'sk-key'")
    assert "sk-key" not in files
    assert "named at run time" in left_out, left_out


def test_a_value_the_notebook_showed_is_not_kept_as_its_result(tmp_path: Path) -> None:
    """The saved Out[] becomes tests/notebook_result.txt; not when it shows the secret."""
    path = make_notebook(
        tmp_path / "nb.ipynb",
        ["import os\nos.environ['TOKEN'] = 'sk-shown-by-the-notebook'", "os.environ['TOKEN']"],
    )
    nb = nbformat.read(str(path), as_version=4)
    nb.cells[0].execution_count, nb.cells[1].execution_count = 1, 2
    nb.cells[1].outputs = [nbformat.v4.new_output(
        "execute_result", data={"text/plain": "'sk-shown-by-the-notebook'"}, execution_count=2
    )]  # fmt: skip
    nbformat.write(nb, str(path))
    result = export_notebook(path, settings=SETTINGS, out_dir=tmp_path / "out")
    assert "sk-shown-by-the-notebook" not in written(result.out_dir)
    assert not (result.out_dir / "tests" / "notebook_result.txt").exists()
