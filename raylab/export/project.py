"""The Dagster project folder: every file is made in memory, then written all at once.

An export either writes a complete project or nothing: the files go to a temporary
folder beside the target, which then takes the target's place.
"""

from __future__ import annotations

import ast
import contextlib
import json
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import Conflict
from .cluster import (
    PIPELINE_LABEL,
    READY_TIMEOUT,
    ClusterTarget,
    ray_cluster_spec,
    token_secret_name,
)
from .codegen import Module, StepPlan
from .dependencies import BUILD, PIPELINE, TESTS, ray_requirement
from .environment import Carried
from .errors import ExportError
from .model import Analysis
from .rayservice import FILE as RAYSERVICE
from .rayservice import rayservice_yaml
from .templating import render

REPORT = "EXPORT.md"


@dataclass(frozen=True)
class Project:
    name: str  # the pipeline: a Python identifier, also the package
    notebook: str  # the notebook's file name
    schedule: str  # cron
    analysis: Analysis
    module: Module
    target: ClusterTarget
    carried: Carried = field(default_factory=Carried)

    @property
    def package(self) -> str:
        return self.name

    @property
    def job(self) -> str:
        return f"{self.name}_job"

    @property
    def schedule_name(self) -> str:
        return f"{self.name}_schedule"

    @property
    def config_class(self) -> str:
        return "".join(p.capitalize() for p in self.name.split("_")) + "Config"

    def run_config(self) -> dict[str, Any]:
        config = {p.name: p.value for p in self.analysis.params}
        return {"ops": {step.asset: {"config": dict(config)} for step in self.module.steps}}


def project_files(p: Project, report: str) -> dict[str, str | bytes]:
    fields = ray_cluster_spec(p.target, p.name)
    snapshot = {_camel(k): v for k, v in fields.items()}
    a, spec = p.analysis, p.target.spec
    steps = p.module.steps
    files = {
        "pyproject.toml": render(
            "pyproject.toml.j2",
            dist=p.name.replace("_", "-") + "-pipeline",
            description=f"Dagster pipeline exported by raylab from {p.notebook}",
            requires_python=f"=={p.target.python_version}.*",
            build=BUILD,
            pipeline=PIPELINE,
            tests=TESTS,
            ray_requirement=ray_requirement(p.target.ray_version, serve=a.uses_serve),
            requirements=a.requirements,
            package=p.package,
            package_modules=p.carried.package_modules,
            file_modules=p.carried.file_modules,
            name=p.name,
        ),
        f"{p.package}/__init__.py": render("__init__.py.j2", name=p.name, notebook=p.notebook),
        f"{p.package}/notebook.py": p.module.source,
        f"{p.package}/cluster.py": render(
            "cluster.py.j2",
            name=p.name,
            source=p.target.source,
            image=p.target.image,
            ray_version=p.target.ray_version,
            python_version=p.target.python_version,
            namespace=p.target.namespace,
            gpu_type=spec.gpu_type,
            gpu_resource=p.target.gpu_resource,
            gpus=spec.gpus,
            workers=spec.workers,
            gpus_per_worker=spec.gpus_per_worker,
            cpus=spec.cpus,
            memory=spec.memory,
            ready_timeout=READY_TIMEOUT,
            labels={PIPELINE_LABEL: p.name},
            token_secret=token_secret_name(p.name),
            ray_cluster_spec=fields,
            requirements=a.requirements,
            env_names=a.env_names,
            modules=list(p.carried.modules),
        ),
        f"{p.package}/resources.py": render("resources.py.j2"),
        f"{p.package}/definitions.py": render(
            "definitions.py.j2",
            name=p.name,
            notebook=p.notebook,
            package=p.package,
            config_class=p.config_class,
            config_doc=_config_doc(a),
            params=a.params,
            steps=[_step_view(p, s, i) for i, s in enumerate(steps)],
            show_arg=_show_arg(p.module),
            job=p.job,
            job_description=f"Reruns {p.notebook} on its Ray cluster.",
            schedule=p.schedule_name,
            cron=p.schedule,
            run_config=p.run_config(),
        ),
        "tests/test_pipeline.py": render(
            "test_pipeline.py.j2",
            package=p.package,
            assets=[s.asset for s in steps],
            final_asset=steps[-1].asset,
        ),
        "tests/raycluster.snapshot.json": json.dumps(snapshot, indent=2) + "\n",
        REPORT: report,
    }
    if a.result_text is not None:
        files["tests/notebook_result.txt"] = a.result_text + "\n"
    if a.serve_apps:
        files[RAYSERVICE] = rayservice_yaml(a, p.target, p.name)
    _check_python(files)  # what raylab generated; the notebook's own modules are theirs
    return {**files, **p.carried.files}


def _step_view(p: Project, step: StepPlan, index: int) -> dict[str, Any]:
    cells = ", ".join(str(c) for c in step.cells)
    return {
        "asset": step.asset,
        "function": step.function,
        "cells": cells,
        "upstream": p.module.steps[index - 1].asset if index else None,
        "description": f"{'Cell' if len(step.cells) == 1 else 'Cells'} {cells} of "
        f"{p.notebook}, run on Ray.",
    }


def _show_arg(module: Module) -> str:
    """The step functions' keyword for the metadata recorder (renamed if the notebook
    already uses `_show`)."""
    tree = ast.parse(module.source)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == module.steps[0].function:
            return node.args.kwonlyargs[-1].arg
    raise AssertionError("step function not found in the generated module")


def _config_doc(a: Analysis) -> str:
    if not a.params:
        return "Run configuration (none: the notebook has no `parameters` cell)."
    cell = a.params[0].cell
    return f"The notebook's `parameters` cell (cell {cell}): its values are the defaults."


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(w.capitalize() for w in rest)


def _check_python(files: Mapping[str, str]) -> None:
    """Every generated module compiles, and none calls IPython."""
    for path, text in files.items():
        if not path.endswith(".py"):
            continue
        try:
            tree = ast.parse(text, filename=path)
            compile(tree, path, "exec")
        except SyntaxError as exc:
            raise ExportError(
                f"the generated {path} does not compile ({exc.msg}, line {exc.lineno})",
                detail="this is a raylab bug; the notebook's cells are in EXPORT.md's table",
            ) from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Name) and node.id == "get_ipython":
                raise AssertionError(f"{path} calls get_ipython()")


def write_project(out_dir: Path, files: Mapping[str, str | bytes], *, force: bool) -> None:
    if out_dir.exists():
        if not force:
            raise Conflict(
                f"{out_dir} already exists; nothing was written",
                detail="pass --force to replace it, or --out to write elsewhere",
            )
        if not out_dir.is_dir() or not (not any(out_dir.iterdir()) or (out_dir / REPORT).is_file()):
            raise Conflict(
                f"{out_dir} is not an earlier export (no {REPORT}); it was left as it is",
                detail="choose another folder with --out",
            )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}-", dir=out_dir.parent))
    try:
        staging.chmod(0o755)  # mkdtemp's 0700 would follow the folder into place
        for rel, text in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(text, bytes):
                path.write_bytes(text)
            else:
                path.write_text(text, encoding="utf-8")
        if out_dir.exists():
            old = staging.with_name(staging.name + "-old")
            out_dir.rename(old)
            staging.rename(out_dir)
            shutil.rmtree(old, ignore_errors=True)
        else:
            staging.rename(out_dir)
    except BaseException:
        with contextlib.suppress(OSError):
            shutil.rmtree(staging)
        raise
