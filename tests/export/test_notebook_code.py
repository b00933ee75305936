"""Notebook cells -> the code a pipeline runs: magics, Ray's lifecycle, display, parameters.

Pure tests (no Ray, no Dagster): each exports a small notebook and reads the files.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

from raylab.config import Settings
from raylab.errors import Conflict
from raylab.export import ExportError, ExportResult, export_notebook

from .support import Cell, make_notebook, read_tree

SETTINGS = Settings.from_config()


def export(tmp_path: Path, content: list[Cell], **kw: Any) -> tuple[ExportResult, dict[str, str]]:
    nb = make_notebook(tmp_path / "nb.ipynb", content)
    result = export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out", **kw)
    return result, read_tree(result.out_dir)


def module(files: dict[str, str], name: str = "nb") -> str:
    return files[f"{name}/notebook.py"]


def run_body(source: str, function: str = "run") -> str:
    tree = ast.parse(source)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    return ast.unparse(fn)


def top_level_names(source: str) -> set[str]:
    tree = ast.parse(source)
    return {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}


def test_magics_become_dependencies_or_notes_and_never_get_ipython(tmp_path: Path) -> None:
    _result, files = export(
        tmp_path,
        [
            "%load_ext raylab\n%raycluster up --gpus 2",
            '%pip install -q "pandas>=2" rich==13.* -r requirements.txt --index-url https://x',
            "!pip install tqdm\n!python -m pip install --upgrade typer\n!nvidia-smi",
            "%conda install cudatoolkit\n%matplotlib inline\n%env API_MODE=fast",
            "%time total = sum(range(10))\ntotal?",
            "%%time\nsquares = [i * i for i in range(4)]\nsquares",
        ],
    )
    source = module(files)
    assert "get_ipython" not in "".join(files.values())
    assert "total = sum(range(10))" in source  # %time's statement is kept
    assert "squares = [i * i for i in range(4)]" in source  # %%time's body too
    pyproject = files["pyproject.toml"]
    for requirement in ('"pandas>=2"', '"rich==13.*"', '"tqdm"', '"typer"'):
        assert requirement in pyproject
    assert "requirements.txt" not in pyproject
    assert "https://x" not in pyproject
    report = files["EXPORT.md"]
    for written in ("`!nvidia-smi`", "`%conda install cudatoolkit`", "`%matplotlib inline`",
                    "`%raycluster up --gpus 2`", "`%env API_MODE=…`"):  # fmt: skip
        assert written in report
    assert "not copied: -r requirements.txt, --index-url https://x" in report
    assert "API_MODE" in files["nb/cluster.py"]  # forwarded by name, value not copied
    assert "fast" not in "".join(files.values())  # the report names it, never its value


def test_a_cell_run_as_a_ray_job_is_a_step_unchanged(tmp_path: Path) -> None:
    _result, files = export(
        tmp_path,
        [
            "def double(x):\n    return 2 * x",
            "%%raycluster job train --gpus 1\nimport ray\ntotal = sum(ray.get([ray.remote("
            "double).remote(i) for i in range(4)]))\ntotal",
        ],
    )
    source = module(files)
    assert "get_ipython" not in source
    assert "total = sum(ray.get([ray.remote(double).remote(i) for i in range(4)]))" in source
    assert "`%%raycluster job train --gpus 1`" in files["EXPORT.md"]
    assert "the step runs its body on the pipeline's cluster" in files["EXPORT.md"]


def test_cell_magics_whose_body_is_not_python_stop_the_export(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", ["x = 1", "%%bash\necho hi\n"])
    with pytest.raises(ExportError, match=r"cell 2 is a %%bash cell"):
        export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("cells", "message"),
    [
        (["x = 1", "y = (x +\n"], r"cell 2, line \d: "),
        ([], "no code cells"),
        (["# md: only words", "   \n"], "no code cells"),
        (["%load_ext raylab", "!ls"], "nothing to export"),
    ],
)
def test_unexportable_notebooks_write_nothing(
    tmp_path: Path, cells: list[Cell], message: str
) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", cells)
    with pytest.raises(ExportError, match=message):
        export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nb.ipynb"]


def test_ray_init_and_shutdown_go_wherever_they_are(tmp_path: Path) -> None:
    result, files = export(
        tmp_path,
        [
            "import ray as r\nfrom ray import shutdown as stop\nr.init(num_cpus=2)",
            "if not r.is_initialized():\n    r.init()\nctx = r.init(address='auto')",
            "def setup():\n    r.init()\n    return 1\n\nvalue = setup() + 1\nprint(ctx)",
            "stop()\nr.shutdown()",
        ],
    )
    source = module(files)
    assert ".init(" not in source
    assert "shutdown" not in source
    assert "stop()" not in source
    assert "def setup():\n    return 1" in source  # the body lost only ray.init
    assert any("undefined name 'ctx'" in u for u in result.undefined_names)
    assert "arguments are not carried over" in files["EXPORT.md"]


def test_display_only_code_is_dropped_and_shown_values_become_metadata(tmp_path: Path) -> None:
    _, files = export(
        tmp_path,
        [
            "import json\nfrom IPython.display import HTML, display\n"
            "import matplotlib.pyplot as plt",
            "data = [3, 1, 2]\ndisplay(HTML('<b>x</b>'))\nfig, ax = plt.subplots()\n"
            "ax.plot(data)\nplt.show()\nlen(data)",
            "try:\n    import seaborn as sns\nexcept ImportError:\n    sns = None\n"
            "for i in range(2):\n    plt.plot(data)\n    print(i)",
            "result = sorted(data)\nresult;",
            "json.dumps(result)",
        ],
    )
    source = module(files)
    assert "plt" not in source
    assert "display" not in source
    assert "sns" not in source
    assert "matplotlib" not in files["pyproject.toml"]
    body = run_body(source)
    assert "for i in range(2):\n        print(i)" in body  # the loop stays, its plot goes
    # Each cell's shown value is recorded; the last one is the asset's value.
    assert "_show('len(data)', _result)" in body
    assert "_show('result'" not in body  # a trailing ; shows nothing
    assert body.rstrip().endswith("_show('json.dumps(result)', _result)\n    return _result")


def test_parameters_cell_becomes_a_typed_config(tmp_path: Path) -> None:
    result, files = export(
        tmp_path,
        [
            (
                "epochs = 3\nlr = 1e-3\nname = 'run-1'\ndebug = False\nlayers = (64, 32)\n"
                "weights = {'a': 1, 'b': 2.5}\ncheckpoint = None\n_private = 1\n"
                "steps = epochs * 10",
                ["parameters"],
            ),
            "print(epochs, lr, name, debug, layers, weights, checkpoint, _private, steps)",
        ],
    )
    definitions = files["nb/definitions.py"]
    for field in ("epochs: int = 3", "lr: float = 0.001", 'name: str = "run-1"',
                  "debug: bool = False", "layers: list[int] = [64, 32]",
                  'weights: dict[str, float] = {"a": 1, "b": 2.5}',
                  "checkpoint: str | None = None"):  # fmt: skip
        assert field in definitions
    assert "_private" not in definitions
    assert "steps:" not in definitions
    assert result.undefined_names == []  # parameters are bound where the cell was
    body = run_body(module(files))
    assert "_private = 1" in body
    assert "steps = epochs * 10" in body
    assert '"epochs": 3' in definitions  # the schedule's explicit run config


def test_functions_workers_import_live_at_module_level(tmp_path: Path) -> None:
    _, files = export(
        tmp_path,
        [
            ("factor = 3", ["parameters"]),
            "import math\nimport ray\n\n@ray.remote(num_gpus=1)\ndef pure(x):\n"
            "    return math.sqrt(x)\n\nclass Point:\n    dims = 2\n\n"
            "def uses_factor(x):\n    return x * factor\n\n"
            "def via_other(x):\n    return uses_factor(x) + 1",
            "total = 0\n\ndef add(x):\n    global total\n    total += x\n\nadd(2)\ntotal",
        ],
    )
    source = module(files)
    assert {"pure", "Point", "run", "_no_show"} == top_level_names(source)
    body = run_body(source)
    assert "def uses_factor" in body
    assert "def via_other" in body
    assert "nonlocal total" in body  # a notebook global is the step's variable now
    assert "@ray.remote(num_gpus=1)\ndef pure(x):" in source  # decorator kept with its def


def test_undefined_names_across_cells_are_reported(tmp_path: Path) -> None:
    result, files = export(tmp_path, ["a = helper(1)", "def helper(x):\n    return x", "b = c"])
    assert result.undefined_names == [
        "cell 1, line 1: undefined name 'helper'",
        "cell 3, line 1: undefined name 'c'",
    ]
    assert "cell 3, line 1: undefined name 'c'" in files["EXPORT.md"]


def test_secrets_written_in_the_notebook_are_not_copied(tmp_path: Path) -> None:
    _, files = export(
        tmp_path,
        [
            "import os\nos.environ['WANDB_API_KEY'] = 'sk-very-secret'",
            "token = os.getenv('HF_TOKEN')\nmode = os.environ.get('MODE', 'x')\n"
            "gpu = os.environ.get('CUDA_VISIBLE_DEVICES')",
        ],
    )
    everything = "".join(files.values())
    assert "sk-very-secret" not in everything
    cluster = files["nb/cluster.py"]
    assert 'ENV_VARS = ["WANDB_API_KEY", "HF_TOKEN", "MODE"]' in cluster
    assert "dg.EnvVar(name)" in files["nb/resources.py"]


def test_tagged_cells_and_steps(tmp_path: Path) -> None:
    _, files = export(
        tmp_path,
        [
            ("n = 4", ["parameters"]),
            ("import ray\nxs = list(range(n))", ["step:load data"]),
            "scratch = 1",  # untagged: inherits the step above
            ("def f(v):\n    return v * n\n\nys = [f(x) for x in xs]", ["step:train"]),
            ("print('not exported')", ["no-export"]),
            "total = sum(ys) + scratch\ntotal",
        ],
        cells="all",
    )
    source = module(files)
    assert "not exported" not in source
    assert {"run_load_data", "run_train"} <= top_level_names(source)
    assert "return {'scratch': scratch, 'xs': xs}" in run_body(source, "run_load_data")
    train = run_body(source, "run_train")
    assert "xs = _carried['xs']" in train
    assert "return _result" in train
    definitions = files["nb/definitions.py"]
    assert "def train(" in definitions
    assert "load_data: dict[str, Any]," in definitions


def test_out_folder_is_not_replaced_unless_forced(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", ["x = 1\nx"])
    out = tmp_path / "out"
    export_notebook(nb, settings=SETTINGS, out_dir=out)
    (out / "mine.txt").write_text("kept?")
    with pytest.raises(Conflict, match="already exists; nothing was written"):
        export_notebook(nb, settings=SETTINGS, out_dir=out)
    assert (out / "mine.txt").exists()
    export_notebook(nb, settings=SETTINGS, out_dir=out, force=True)
    assert not (out / "mine.txt").exists()
    other = tmp_path / "project"
    other.mkdir()
    (other / "README").write_text("someone's work")
    with pytest.raises(Conflict, match="not an earlier export"):
        export_notebook(nb, settings=SETTINGS, out_dir=other, force=True)
    assert (other / "README").read_text() == "someone's work"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_name_and_schedule_are_checked(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "My Model (v2).ipynb", ["x = 1"])
    result = export_notebook(nb, settings=SETTINGS, schedule="@daily")
    assert result.name == "my_model_v2"
    assert result.out_dir == tmp_path / "my_model_v2_pipeline"
    assert 'cron_schedule="@daily"' in (result.out_dir / "my_model_v2/definitions.py").read_text()
    from raylab.errors import SpecError

    with pytest.raises(SpecError, match="not a cron schedule"):
        export_notebook(nb, settings=SETTINGS, schedule="daily please", force=True)
