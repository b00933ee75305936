"""`export_notebook`: a notebook and its Ray cluster -> a tested Dagster project folder."""

from __future__ import annotations

import keyword
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..config import Settings
from ..errors import SpecError
from ..model import ClusterInfo
from .analysis import analyze
from .cluster import target_for
from .codegen import build_module
from .environment import carried, report_lines
from .notebook import Cell, CellMode, read_cells, select_cells
from .project import Project, project_files, write_project
from .report import build_report

DEFAULT_SCHEDULE = "0 3 * * *"  # daily, 03:00 UTC: after the day's data, before people
_CRON_FIELD = re.compile(r"[0-9A-Za-z*/,\-?]+")  # fullmatch
_CRON_MACROS = frozenset({"@hourly", "@daily", "@weekly", "@monthly"})
# Names the generated modules bind at their top level (definitions.py's imports, its
# `defs` and the builtins it calls; what tests/test_pipeline.py imports next to the
# assets) and the asset functions' parameters: an asset of the same name would replace
# one of them. A step of such a name is renamed; the pipeline (its package, and its asset
# when it has one step) is refused.
_TAKEN = frozenset(
    {"context", "config", "ray_cluster", "defs", "dg", "notebook", "ray_resource", "cluster",
     "local_ray", "rayjob_manifest", "repr", "len", "dict", "str", "object", "json",
     "subprocess", "sys", "datetime", "timedelta"}
)  # fmt: skip
# The package's own modules and the project's tests/ folder.
_OWN_MODULES = frozenset({"definitions", "cluster", "resources", "notebook", "tests"})
# Top-level modules the project imports: a package of the same name would hide them, or
# be hidden by them (the standard library comes first on sys.path).
_IMPORTED = frozenset({"dagster", "dagster_ray", "ray", "kubernetes", "pytest"})


@dataclass(frozen=True)
class ExportResult:
    name: str
    out_dir: Path
    files: list[str]  # relative to out_dir
    report: str  # EXPORT.md
    warnings: list[str] = field(default_factory=list)  # one line each, for the verb
    undefined_names: list[str] = field(default_factory=list)  # pyflakes, as in EXPORT.md


def export_notebook(
    notebook_path: str | Path,
    *,
    out_dir: str | Path | None = None,
    name: str | None = None,
    cluster: ClusterInfo | None = None,
    cluster_source: str | None = None,
    settings: Settings | None = None,
    schedule: str | None = None,
    cells: CellMode = "auto",
    force: bool = False,
) -> ExportResult:
    """Analyse the notebook, generate the project in memory, then write it (or nothing).

    `cluster` is the cluster whose spec the pipeline runs on (None: the configured defaults).
    """
    path = Path(notebook_path).expanduser().resolve()
    settings = settings or Settings.load()
    pipeline = pipeline_name(name if name is not None else path.stem)
    check_free(pipeline, given=name is not None)
    cron = check_schedule(schedule or DEFAULT_SCHEDULE)
    if cells not in ("auto", "tagged", "all"):
        raise SpecError("cells", f"{cells!r}: use tagged or all")
    selected = select_cells(read_cells(path), cells)
    analysis = analyze(selected, _steps(selected, pipeline))
    source = cluster_source or (
        f"cluster {cluster.name!r}"
        if cluster
        else "raylab's defaults (no cluster was connected or named with --cluster)"
    )
    target = target_for(cluster, settings, source)
    # The same modules, requirements and env-var names as the cluster's environment.
    carry = carried(
        cluster.environment if cluster else None,
        pipeline,
        settings.options.working_dir_max_mib * 2**20,
    )
    analysis.add_requirements(carry.requirements)
    analysis.add_env(list(carry.env_names))
    module = build_module(analysis, pipeline, path.name)
    report = build_report(
        name=pipeline, notebook=path.name, schedule=cron, a=analysis, steps=module.steps,
        target=target,
    )  # fmt: skip
    extra = report_lines(carry)
    if extra:
        report = report.rstrip("\n") + "\n" + "\n".join(extra) + "\n"
    project = Project(pipeline, path.name, cron, analysis, module, target, carry)
    files = project_files(project, report)
    out = Path(out_dir).expanduser() if out_dir else path.parent / f"{pipeline}_pipeline"
    out = out.resolve()
    write_project(out, files, force=force)
    warnings = [f"undefined name: {u}" for u in analysis.undefined]
    warnings += [f"not carried into the pipeline: {n}" for n in carry.notes]
    if analysis.gpu_cells and not target.spec.gpus:
        numbers = ", ".join(map(str, analysis.gpu_cells))
        warnings.append(f"cells {numbers} ask Ray for GPUs but the pipeline's cluster has none; "
                        "export with --cluster NAME of a GPU cluster")  # fmt: skip
    if cluster is None:
        warnings.append("no cluster connected: the pipeline uses the default cluster spec; "
                        "pass --cluster NAME to use one of yours")  # fmt: skip
    for r in analysis.serve_refused:
        warnings.append(f"Serve app of cell {r.cell}, line {r.line} not in rayservice.yaml: "
                        f"{r.why}")  # fmt: skip
    if not analysis.in_order:
        warnings.append("the notebook's cells were run out of order; the pipeline runs them "
                        "top to bottom")  # fmt: skip
    return ExportResult(pipeline, out, sorted(files), report, warnings, analysis.undefined)


def pipeline_name(raw: str) -> str:
    """A name Dagster, Python and Kubernetes labels all accept: `Train Model` -> train_model."""
    name = re.sub(r"[^a-z0-9]+", "_", raw.strip().lower()).strip("_")[:40].rstrip("_")
    if not name:
        raise SpecError("name", f"{raw!r} has no letters or digits; use a name like train_model")
    if name[0].isdigit() or keyword.iskeyword(name):
        name = f"pipeline_{name}"
    return name


def check_free(pipeline: str, *, given: bool) -> None:
    """Refuse a pipeline name that the generated project already uses for something else."""
    if pipeline in _OWN_MODULES:
        what = "the tests/ folder" if pipeline == "tests" else f"the module {pipeline}.py"
        taken = f"{what} of every exported project"
    elif pipeline in _IMPORTED or pipeline in sys.stdlib_module_names:
        taken = f"the module {pipeline} that Python or the project imports"
    elif pipeline in _TAKEN:
        taken = "a name the generated definitions and tests use"
    else:
        return
    origin = "" if given else " (from the notebook's file name)"
    raise SpecError("name", f"{pipeline!r}{origin} is {taken}; give the pipeline another name")


def check_schedule(cron: str) -> str:
    cron = " ".join(cron.split())
    if cron in _CRON_MACROS:
        return cron
    fields = cron.split(" ")
    if len(fields) != 5 or not all(_CRON_FIELD.fullmatch(f) for f in fields):
        raise SpecError(
            "schedule", f"{cron!r} is not a cron schedule such as '0 3 * * *' (daily at 03:00)"
        )
    return cron


def _steps(selected: Sequence[Cell], pipeline: str) -> list[str]:
    """The step (asset) of each cell: its `step:NAME` tag, else the step above it."""
    named = [c.step for c in selected]
    if not any(named):
        return [pipeline] * len(selected)
    first = next(s for s in named if s)
    steps: list[str] = []
    current = first
    taken = _TAKEN | {pipeline, f"{pipeline}_job", f"{pipeline}_schedule"}
    for s in named:
        current = s or current
        steps.append(current if current not in taken else f"{current}_step")
    return steps
