"""A notebook that deploys Serve apps -> steps without `serve.run`, and rayservice.yaml.

Pure tests (no Ray cluster, no Dagster run): each exports a small notebook and reads what a
user gets: the step code, EXPORT.md, rayservice.yaml (parsed as YAML, and its
serveConfigV2 checked by Serve's own schema), and the app imported from notebook.py.
"""

from __future__ import annotations

import ast
import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from raylab.config import Settings
from raylab.export import ExportResult, export_notebook
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec

from .support import Cell, make_notebook, read_tree

SETTINGS = Settings.from_config()
DEPLOYMENT = (
    "from ray import serve\n\n"
    '@serve.deployment(ray_actor_options={"num_gpus": 1})\n'
    "class Model:\n"
    "    def __call__(self, request):\n"
    '        return "hi"'
)


def export(tmp_path: Path, cells: list[Cell], **kw: Any) -> tuple[ExportResult, dict[str, str]]:
    nb = make_notebook(tmp_path / "nb.ipynb", cells)
    result = export_notebook(nb, settings=SETTINGS, out_dir=tmp_path / "out", **kw)
    return result, read_tree(result.out_dir)


def apps(files: dict[str, str]) -> list[dict[str, Any]]:
    """serveConfigV2's applications, as KubeRay reads them (YAML inside YAML)."""
    manifest = yaml.safe_load(files["rayservice.yaml"])
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    config = yaml.safe_load(manifest["spec"]["serveConfigV2"])
    from ray.serve.schema import ServeDeploySchema

    ServeDeploySchema.model_validate(config)  # what Serve itself accepts
    return list(config["applications"])


def serve_calls(source: str) -> list[str]:
    """Calls in `source` of Serve's run or start, under the names the tests give them."""
    names = {"serve.run", "serve.start", "rs.run", "ray.serve.run", "ray.serve.start",
             "deploy", "start_serve"}  # fmt: skip
    tree = ast.parse(source)
    return [ast.unparse(n) for n in ast.walk(tree)
            if isinstance(n, ast.Call) and ast.unparse(n.func) in names]  # fmt: skip


def step_code(source: str) -> str:
    tree = ast.parse(source)
    return "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, ast.FunctionDef)
                     and n.name.startswith("run"))  # fmt: skip


@pytest.fixture
def imported(tmp_path: Path) -> Iterator[Any]:
    """Import a generated package's notebook module as Serve would (`pkg.notebook`)."""
    added: list[str] = []

    def load(out_dir: Path, package: str) -> Any:
        sys.path.insert(0, str(out_dir))
        added.append(package)
        return importlib.import_module(f"{package}.notebook")

    yield load
    for package in added:
        for name in [m for m in sys.modules if m == package or m.startswith(f"{package}.")]:
            del sys.modules[name]
    sys.path[:] = [p for p in sys.path if not p.startswith(str(tmp_path))]


def test_every_alias_of_serve_run_is_left_out_and_its_app_written(tmp_path: Path) -> None:
    result, files = export(
        tmp_path,
        [
            "import ray\nimport ray.serve\nimport ray.serve as rs\n"
            "from ray.serve import run as deploy, start as start_serve",
            DEPLOYMENT,
            "app = Model.bind()\nhandle = serve.run(app, name='a', route_prefix='/a')",
            "rs.run(Model.options(num_replicas=2).bind(), name='b', route_prefix='/b')",
            "ray.serve.run(Model.bind(), True, 'c', route_prefix='/c')\nstart_serve()",
            "deploy(Model.bind(), name='d', route_prefix='/d')",
            "total = 41 + 1\ntotal",
        ],
    )
    source = files["nb/notebook.py"]
    assert serve_calls(source) == []  # nothing deploys, at import or in a step
    assert "total = 41 + 1" in step_code(source)  # the rest of the notebook still runs
    assert [(x["name"], x["route_prefix"], x["import_path"]) for x in apps(files)] == [
        ("a", "/a", "nb.notebook:app"),
        ("b", "/b", "nb.notebook:serve_app"),
        ("c", "/c", "nb.notebook:serve_app_2"),
        ("d", "/d", "nb.notebook:serve_app_3"),
    ]
    report = files["EXPORT.md"]
    assert "## Serve apps" in report
    for line in ("| 3, 2 | `handle = serve.run(app, name='a', route_prefix='/a')` |",
                 "| 4, 1 | `rs.run(Model.options(num_replicas=2).bind(), name='b', "
                 "route_prefix='/b')` |",
                 "| 5, 2 | `start_serve()` |", "| 6, 1 | `deploy(Model.bind(), name='d', "
                 "route_prefix='/d')` |"):  # fmt: skip
        assert line in report
    assert "kubectl apply -f rayservice.yaml" in report
    assert '"ray[data,client,serve]==' in files["pyproject.toml"]  # notebook.py imports Serve
    assert "handle is not defined in the pipeline" in report
    assert "`nb.notebook:app`" in report
    assert "| 3 | Serve app for rayservice.yaml (module top) |" in report  # the Cells table
    assert result.warnings == [
        "no cluster connected: the pipeline uses the default cluster spec; pass --cluster "
        "NAME to use one of yours"
    ]


def test_defaults_and_a_generated_name_that_collides_with_nothing(tmp_path: Path) -> None:
    _result, files = export(
        tmp_path,
        [DEPLOYMENT, "serve_app = 3\nserve.run(Model.bind())\nserve_app"],
    )
    (app,) = apps(files)
    assert (app["name"], app["route_prefix"]) == ("default", "/")
    variable = app["import_path"].split(":")[1]
    assert variable != "serve_app"
    assert variable.isidentifier()
    tree = ast.parse(files["nb/notebook.py"])
    assigned = [ast.unparse(n) for n in tree.body if isinstance(n, ast.Assign)]
    assert assigned == [f"{variable} = Model.bind()"]
    assert "serve_app = 3" in step_code(files["nb/notebook.py"])


def test_importing_the_app_deploys_nothing_and_runs_no_cell(tmp_path: Path, imported: Any) -> None:
    marker = tmp_path / "ran"
    result, files = export(
        tmp_path,
        [
            f"from pathlib import Path\nPath({str(marker)!r}).write_text('cell ran')",
            DEPLOYMENT,
            "app = Model.bind()\nserve.run(app, blocking=True)",
        ],
        name="served",
    )
    assert "app = Model.bind()" not in step_code(files["served/notebook.py"])
    module = imported(result.out_dir, "served")
    import ray
    from ray.serve import Application

    assert isinstance(module.app, Application)
    assert not marker.exists()  # the cells' code stays in the step
    assert not ray.is_initialized()  # nothing connected, nothing deployed


def test_hostile_names_reach_the_manifest_as_written(tmp_path: Path) -> None:
    name = "x\": 1\n#'{a} ../../etc: [yes]"
    name = name.replace("\n", " ")  # printable: a newline is refused (below)
    route = "/a/../b:#c'\"d%20e"  # no blanks: a URL path has none
    _result, files = export(
        tmp_path, [DEPLOYMENT, f"serve.run(Model.bind(), name={name!r}, route_prefix={route!r})"]
    )
    (app,) = apps(files)
    assert (app["name"], app["route_prefix"]) == (name, route)
    manifest = yaml.safe_load(files["rayservice.yaml"])
    assert set(manifest) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(manifest["spec"]) == {"serveConfigV2", "rayClusterConfig"}


@pytest.mark.parametrize(
    ("call", "why"),
    [
        ("serve.run(Model.bind(), route_prefix='model')",
         "route_prefix 'model' does not start with \"/\""),
        ("serve.run(Model.bind(), route_prefix='/a\\x1b[2J')",
         "route_prefix '/a\\x1b[2J' has control, unprintable or blank characters"),
        ("serve.run(Model.bind(), route_prefix='/model/')",
         'route_prefix \'/model/\' ends with "/"'),
        ("serve.run(Model.bind(), route_prefix='/a b')",
         "route_prefix '/a b' has control, unprintable or blank characters"),
        ("serve.run(Model.bind(), name='a\\nb')",
         "its app name 'a\\nb' has control or unprintable characters"),
        ("serve.run(Model.bind(), name=NAME)", "its name= is not a literal string (NAME)"),
        ("serve.run(Model.bind(path))", "the app reads path, which the cells compute"),
        ("app = Model.bind(path)\nserve.run(app)", "the app (cell 3) reads path"),
        ("def go():\n    serve.run(Model.bind())\ngo()", "called inside a function"),
        ("handles = [serve.run(Model.bind())]", "called inside an expression"),
        ("serve.run(Model)", "Model is a deployment, not an app: serve.run takes Model.bind()"),
    ],
)  # fmt: skip
def test_an_app_that_cannot_be_written_is_refused_in_one_line(
    tmp_path: Path, call: str, why: str
) -> None:
    result, files = export(tmp_path, [DEPLOYMENT, "path = '/models/x'\nNAME = 'a'", call])
    assert "rayservice.yaml" not in files
    assert serve_calls(files["nb/notebook.py"]) == []
    report = files["EXPORT.md"]
    assert "**Not in `rayservice.yaml`** (so it was not written):" in report
    (refused,) = [line for line in report.splitlines() if line.startswith("- cell 3, line")]
    assert why in refused
    (warning,) = [w for w in result.warnings if w.startswith("Serve app of cell 3")]
    assert why in warning


def test_a_later_app_of_the_same_name_replaces_the_earlier(tmp_path: Path) -> None:
    _result, files = export(
        tmp_path,
        [DEPLOYMENT, "serve.run(Model.bind(), route_prefix='/v1')",
         "serve.run(Model.options(num_replicas=3).bind(), route_prefix='/v2')"],
    )  # fmt: skip
    (app,) = apps(files)
    assert app["route_prefix"] == "/v2"
    assert "replaced by the app of the same name 'default' in cell 3, line 1" in files["EXPORT.md"]


def test_the_rayservice_runs_on_the_pipelines_cluster(tmp_path: Path) -> None:
    spec = ClusterSpec.from_mapping(
        {"name": "train", "gpus": 4, "gpu_type": "a100", "workers": 2}, SETTINGS.profiles
    )
    info = ClusterInfo(name="train", owner="alice", backend="kuberay", phase=Phase.READY,
                       spec=spec, namespace="ml")  # fmt: skip
    nb = make_notebook(tmp_path / "Serve Model.ipynb", [DEPLOYMENT, "serve.run(Model.bind())"])
    result = export_notebook(nb, settings=SETTINGS, cluster=info, out_dir=tmp_path / "out")
    files = read_tree(result.out_dir)
    manifest = yaml.safe_load(files["rayservice.yaml"])
    assert manifest["metadata"] == {"name": "serve-model", "namespace": "ml",
                                    "labels": {"raylab.io/pipeline": "serve_model"}}  # fmt: skip
    cluster = manifest["spec"]["rayClusterConfig"]
    snapshot = __import__("json").loads(files["tests/raycluster.snapshot.json"])
    (group,) = cluster["workerGroupSpecs"]
    # KubeRay gives a RayService's workers its own readiness probe, which also asks the
    # Serve proxy: only where raylab's is not there.
    ray = group["template"]["spec"]["containers"][0]
    assert "readinessProbe" not in ray
    assert "livenessProbe" in ray
    snapshot["workerGroupSpecs"][0]["template"]["spec"]["containers"][0].pop("readinessProbe")
    assert cluster == snapshot  # otherwise the RayJobs' cluster, field for field
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert (group["replicas"], limits["nvidia.com/gpu"]) == (2, "2")
    assert "`serve-model` in namespace `ml`" in files["EXPORT.md"]


def test_a_notebook_without_serve_gets_no_rayservice(tmp_path: Path) -> None:
    _result, files = export(tmp_path, ["import ray\nx = 1\nx"])
    assert "rayservice.yaml" not in files
    assert "Serve" not in files["EXPORT.md"]
    assert "Serve" not in files["nb/notebook.py"]
    assert '"ray[data,client]==' in files["pyproject.toml"]
