"""Attack: a pipeline or step name that the generated project already uses.

The pipeline's name is its package and, with one step, its asset function: `notebook`
replaced the module definitions.py imports under that name, `cluster` the module the
generated tests import, `dagster` or `json` would hide (or be hidden by) the module the
project imports. Such a name is refused with one line naming the field (`--name`, or
`name` over REST) and nothing is written; a step of such a name is renamed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tornado.httpclient import HTTPClientError

from raylab.commands import CommandError
from raylab.commands.verbs import Commands
from raylab.config import Settings
from raylab.errors import SpecError
from raylab.export import export_notebook
from tests.export.support import Lines, make_notebook
from tests.server.conftest import as_user

SETTINGS = Settings.from_config()
TAKEN = ["definitions", "cluster", "resources", "notebook", "tests", "dg", "ray_resource",
         "local_ray", "dagster", "dagster_ray", "ray", "json", "os"]  # fmt: skip


@pytest.mark.parametrize("name", TAKEN)
def test_a_taken_pipeline_name_is_refused_naming_the_field(tmp_path: Path, name: str) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", ["x = 1"])
    with pytest.raises(SpecError) as err:
        export_notebook(nb, settings=SETTINGS, name=name, out_dir=tmp_path / "out")
    assert err.value.field == "name"
    assert "\n" not in err.value.message
    assert err.value.for_command_line().startswith(f"--name: {name!r} is ")
    assert not (tmp_path / "out").exists()


def test_a_name_from_the_file_name_says_so(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "Notebook.ipynb", ["x = 1"])
    with pytest.raises(SpecError, match=r"'notebook' \(from the notebook's file name\)"):
        export_notebook(nb, settings=SETTINGS)
    assert [p.name for p in tmp_path.iterdir()] == ["Notebook.ipynb"]


def test_the_cli_answers_one_line_about_name(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", ["x = 1"])
    runner = Commands(Lines(), prog="raylab", may_connect=False, settings=SETTINGS)  # type: ignore[arg-type]
    with pytest.raises(CommandError, match=r"^--name: 'cluster' is the module cluster\.py"):
        runner.run(["export", str(nb), "--name", "cluster"])
    assert not (tmp_path / "cluster_pipeline").exists()


async def test_the_rest_api_answers_422_with_the_field(jp_fetch: Any, jp_root_dir: Path) -> None:
    make_notebook(jp_root_dir / "nb.ipynb", ["x = 1"])
    body = json.dumps({"path": "nb.ipynb", "name": "resources"})
    with pytest.raises(HTTPClientError) as err:
        await jp_fetch("raylab", "export", method="POST", body=body, headers=as_user("eve"))
    assert err.value.code == 422
    assert err.value.response is not None
    assert json.loads(err.value.response.body)["field"] == "name"
    assert not (jp_root_dir / "resources_pipeline").exists()


@pytest.mark.parametrize("step", ["notebook", "cluster", "dg", "local_ray", "nb_job"])
def test_a_step_of_a_taken_name_is_renamed(tmp_path: Path, step: str) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", [("x = 1", [f"step:{step}"]),
                                               ("y = x + 1\ny", ["step:last"])])  # fmt: skip
    result = export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out")
    definitions = (result.out_dir / "nb" / "definitions.py").read_text()
    assert f"def {step}_step(" in definitions
    assert f"def {step}(" not in definitions
