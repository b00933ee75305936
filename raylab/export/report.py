"""EXPORT.md: what went into the pipeline, what did not and why, and how to run it."""

from __future__ import annotations

import json

from .cluster import ClusterTarget, token_secret_name
from .codegen import StepPlan
from .dependencies import PIPELINE, ray_requirement
from .model import Analysis
from .rayservice import FILE as RAYSERVICE
from .rayservice import import_path, rayservice_name
from .run_rights import RULES, role_yaml


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    def cell(text: str) -> str:
        return text.replace("|", "\\|").replace("\n", " ")

    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return out


def build_report(
    *,
    name: str,
    notebook: str,
    schedule: str,
    a: Analysis,
    steps: list[StepPlan],
    target: ClusterTarget,
) -> str:
    spec, package = target.spec, name
    gpus = f"{spec.gpus} × {spec.gpu_type}" if spec.gpus else "none"
    lines = [
        f"# {name}: a Dagster pipeline from {notebook}",
        "",
        f"Exported by raylab. The notebook's cells {_cells(_code_cells(a))} run, top to "
        "bottom, as "
        + (
            f"the asset `{steps[0].asset}`"
            if len(steps) == 1
            else "the assets " + " → ".join(f"`{s.asset}`" for s in steps)
        )
        + f" on a Ray cluster like the notebook's ({_cluster_words(target)}). "
        f"The job `{name}_job` has a schedule `{name}_schedule` (`{schedule}`, UTC) that "
        "is stopped until someone turns it on.",
        "",
        "## Run it",
        "",
        "```sh",
        "pip install -e '.[test]'",
        "pytest                      # definitions, schedule, manifest, and a run on a local Ray",
        f"RAYLAB_RAY_BACKEND=local dagster dev -m {package}.definitions   # on this machine",
        f"dagster dev -m {package}.definitions   # each step on a new KubeRay RayJob",
        "```",
        "",
        "Launch runs from `dagster dev` or a schedule: after a run, `dagster job execute` "
        "initializes the resources once more to build its result, which makes a second "
        "RayJob.",
        "",
        "| environment variable | meaning |",
        "|---|---|",
        "| `RAYLAB_RAY_BACKEND` | `kuberay` (default): a RayJob per step from `cluster.py`; "
        "`local`: Ray on this machine |",
        f"| `RAYLAB_RAY_NAMESPACE` | namespace of the RayJobs (default `{target.namespace}`) |",
        "| `RAY_ADDRESS` | with `local`: an existing Ray to use instead of a private one "
        "(a raylab cluster's: with the `RAY_AUTH_*` lines of `raylab env NAME`) |",
        "| `RAY_AUTH_MODE`, `RAY_AUTH_TOKEN` | with `kuberay`: `token`, and the token in the "
        f"Secret `{token_secret_name(name)}` (below), which Ray Client presents |",
    ]
    lines += [f"| `{n}` | read by the notebook; passed to Ray workers (`dg.EnvVar`) |"
              for n in a.env_names]  # fmt: skip
    lines += ["", "## Cluster", "", f"From {target.source}.", ""]
    lines += _table(
        ["", ""],
        [
            ["image", f"`{target.image}`"],
            ["Ray / Python", f"{target.ray_version} / {target.python_version}"],
            ["workers", _workers(a, target)],
            ["GPUs", f"{gpus} (`{target.gpu_resource}`, {spec.gpus_per_worker} per worker)"],
            ["per worker", f"{spec.cpus} CPU, {spec.memory} memory"],
            ["node selector", _mapping(target.profile.node_selector)],
            ["tolerations", ", ".join(t.get("key", "?") for t in target.profile.tolerations)
             or "none"],
            ["namespace", target.namespace],
        ],
    )  # fmt: skip
    if a.gpu_cells and not spec.gpus:
        lines += ["", f"**Cells {_cells(a.gpu_cells)} ask Ray for GPUs, but this cluster has "
                  "none**: their tasks would wait forever. Export again with `--cluster` "
                  "naming a GPU cluster, or edit `cluster.py`."]  # fmt: skip
    lines += [
        "",
        "`cluster.py` holds it as dagster-ray `RayClusterSpec` fields (snake_case at the top, "
        "Kubernetes' camelCase inside); `resources.py` makes each step's RayJob from it, in "
        "interactive mode (KubeRay 1.3 or later), without a fixed name, and waits up to "
        "30 minutes for it.",
        "",
        "Ray's token authentication is on, as on the notebook's clusters: every Ray "
        f"container reads the token from the Secret `{token_secret_name(name)}` (key "
        "`auth_token`), and the Dagster run presents it (`RAY_AUTH_MODE=token`, "
        "`RAY_AUTH_TOKEN`). Make the Secret once in that namespace, and give its value to "
        "the runs' environment:",
        "",
        "```sh",
        f"kubectl -n {target.namespace} create secret generic {token_secret_name(name)} "
        "--from-literal=auth_token=$(openssl rand -hex 32)",
        "```",
        "",
        "The runs' Kubernetes identity (the service account of Dagster's run pods, or "
        "whoever runs `dagster`) needs this Role in that namespace, bound with a "
        "RoleBinding:",
        "",
        "```yaml",
        *role_yaml(name, target.namespace).splitlines(),
        "```",
        "",
    ]
    lines += _table(["rule", "why"], [[", ".join(f"`{r}`" for r in rule.resources)
                                       + ": " + ", ".join(rule.verbs), rule.why]
                                      for rule in RULES])  # fmt: skip
    lines += [
        "",
        "## Cells",
        "",
    ]
    lines += _table(["cell", "went to"], [[str(c), _placement(a, c)] for c in a.cells])
    if a.notes:
        lines += ["", "## Left out or changed", ""]
        lines += _table(
            ["cell, line", "notebook", "what", "why"],
            [[f"{n.cell}, {n.line}", f"`{n.written}`", n.action, n.why] for n in a.notes],
        )
    if a.serve_calls:
        lines += ["", *_serve(a, name, target)]
    lines += ["", "## Parameters", ""]
    if a.params:
        lines.append("The `parameters` cell's values are the defaults of the asset "
                     "config, and the schedule's run config writes them out:")  # fmt: skip
        lines.append("")
        lines += _table(
            ["name", "type", "default"],
            [[p.name, f"`{p.annotation}`", f"`{p.value!r}`"] for p in a.params],
        )
    else:
        lines.append("None: tag a cell of literal assignments `parameters` to make them "
                     "configurable per run.")  # fmt: skip
    lines += ["", "## Dependencies", ""]
    lines.append(
        "".join(f"`{r}`, " for r in PIPELINE)
        + f"`{ray_requirement(target.ray_version, serve=a.uses_serve)}` (the kernel's), "
        f"Python {target.python_version}"
        + (", and from the notebook: " + ", ".join(f"`{r}`" for r in a.requirements)
           + " (Ray workers install these too, see `cluster.WORKER_REQUIREMENTS`)"
           if a.requirements else ".")
    )  # fmt: skip
    lines += ["", "## Undefined names", ""]
    if a.undefined:
        lines.append("pyflakes finds these names used but not defined in the exported "
                     "cells, top to bottom; the pipeline fails where they are used:")  # fmt: skip
        lines.append("")
        lines += [f"- {u}" for u in a.undefined]
    else:
        lines.append("None (pyflakes, over the exported cells run top to bottom).")
    if len(steps) > 1:
        lines += ["", "## Steps", ""]
        for s in steps:
            passed = ", ".join(f"`{n}`" for n in s.gives) or "nothing"
            lines.append(f"- `{s.asset}`: cells {_cells(list(s.cells))}; hands on {passed}")
        lines.append("")
        lines.append("Values handed on are stored by Dagster's IO manager between steps (each "
                     "step has a cluster of its own): they must be picklable, not Ray "
                     "object references.")  # fmt: skip
    lines += ["", "## Result", ""]
    if a.result_text is not None:
        lines.append("The last value the cells show is the asset's value; "
                     "`tests/notebook_result.txt` holds what the notebook showed, and the "
                     "local-run test compares. Delete that file if the result is not "
                     "deterministic.")  # fmt: skip
    else:
        lines.append("The last value the cells show is the asset's value" + (
            " (the notebook's saved outputs are not from a top-to-bottom run, so the tests "
            "do not compare them)." if not a.in_order else "."))  # fmt: skip
    if not a.in_order:
        lines += ["", "Note: the notebook's cells were run out of order. The pipeline runs "
                  "them top to bottom, which may not give what the notebook shows."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _code_cells(a: Analysis) -> list[int]:
    return sorted({s.cell for s in a.stmts} | {p.cell for p in a.params})


def _cluster_words(target: ClusterTarget) -> str:
    s = target.spec
    workers = f"{s.workers} worker{'' if s.workers == 1 else 's'}"
    return f"{workers}, {s.gpus} × {s.gpu_type} GPUs" if s.gpus else f"{workers}, no GPUs"


def _cells(cells: list[int]) -> str:
    return ", ".join(str(c) for c in cells)


def _workers(a: Analysis, target: ClusterTarget) -> str:
    spec = target.spec
    if spec.autoscaling:
        return f"{spec.workers} (autoscaling {spec.min_workers}..{spec.max_workers})"
    return str(spec.workers)


def _mapping(d: dict[str, str]) -> str:
    return ", ".join(f"`{k}={v}`" for k, v in d.items()) or "none"


def _placement(a: Analysis, cell: int) -> str:
    stmts = [s for s in a.stmts if s.cell == cell]
    where = []
    if any(s.kind == "import" for s in stmts):
        where.append("imports (module top)")
    if any(s.kind == "def" and s.module_level for s in stmts):
        where.append("functions Ray workers import (module top)")
    if any(s.kind == "app" for s in stmts):
        where.append("Serve app for rayservice.yaml (module top)")
    if any(s.kind in ("code", "show") or (s.kind == "def" and not s.module_level)
           for s in stmts):  # fmt: skip
        step = next(s.step for s in stmts if s.kind in ("code", "show", "def"))
        where.append(f"step `{step}`" if len(a.steps) > 1 else "the asset's code")
    if any(p.cell == cell for p in a.params):
        where.append("config")
    return ", ".join(where) or "nothing (see below)"


def _serve(a: Analysis, package: str, target: ClusterTarget) -> list[str]:
    """The Serve section: the calls left out, the RayService, what it needs."""
    lines = [
        "## Serve apps",
        "",
        "The notebook deploys Ray Serve apps. A pipeline step must end, and `serve.run` "
        "would deploy each app on the step's own cluster, which goes when the step ends "
        "(with `blocking=True` the step would never end), so these calls are left out of "
        "the steps:",
        "",
    ]
    lines += _table(["cell, line", "notebook"],
                    [[f"{c.cell}, {c.line}", f"`{c.written}`"] for c in a.serve_calls])  # fmt: skip
    if a.serve_apps:
        lines += [
            "",
            f"The apps are deployed instead by `{RAYSERVICE}` (beside this file), a KubeRay "
            f"RayService `{rayservice_name(package)}` in namespace `{target.namespace}` on a "
            "cluster like the pipeline's (the image, GPUs and workers above), which keeps "
            "them running and serving:",
            "",
            "```sh",
            f"kubectl apply -f {RAYSERVICE}",
            "```",
            "",
        ]
        lines += _table(
            ["app", "route prefix", "import path"],
            [[_quoted(app.name), _quoted(app.route_prefix) if app.route_prefix is not None
              else "none (handles only)", f"`{import_path(package, app)}`"]
             for app in a.serve_apps],
        )  # fmt: skip
        lines += [
            "",
            f"Serve imports each app from `{package}/notebook.py`, where it is defined at "
            "the top level (its `app = Model.bind(...)` moved there from the step, or a "
            "name given to the expression `serve.run` took): binding a deployment only "
            "describes the app, so importing the module runs no cell and deploys nothing; "
            "the deployment's code runs in its replicas. The pipeline's steps do not use "
            "the apps.",
            "",
            "The RayService's image must hold this project for that import: build one "
            f"`FROM {target.image}` that runs `pip install .` in this folder and set it as "
            f"the `image` of every container in `{RAYSERVICE}` (or give each app a "
            "`runtime_env` whose `working_dir` is the URL of a zip of this folder).",
            "",
            "Its Ray checks the token in the Secret above, as the pipeline's clusters do. "
            "KubeRay deploys the apps through the head's dashboard, which then asks for "
            "that token: KubeRay 1.5.0 (the version raylab tests) has no way to present "
            "it; later versions take `authOptions` in `rayClusterConfig`. Check that your "
            "KubeRay's RayService reaches *Running* (`kubectl get rayservice`).",
        ]
        if a.env_names:
            lines += ["", "The environment variables the notebook reads ("
                      + ", ".join(f"`{n}`" for n in a.env_names) + ") are not set there: "
                      "add them to each app's `runtime_env` `env_vars`, or to the "
                      "containers' `env`."]  # fmt: skip
    if a.serve_refused:
        lines += ["", f"**Not in `{RAYSERVICE}`**" + (" (so it was not written)" if not
                  a.serve_apps else "") + ":", ""]  # fmt: skip
        lines += [f"- cell {r.cell}, line {r.line} (`{r.written}`): {r.why}"
                  for r in a.serve_refused]  # fmt: skip
    return lines


def _quoted(text: str) -> str:
    """A name from the notebook, shown as a JSON string (its quotes and escapes)."""
    return json.dumps(text, ensure_ascii=False)
