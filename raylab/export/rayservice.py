"""rayservice.yaml: the notebook's Serve apps as a KubeRay `RayService`.

A pipeline step must end, so the export leaves `serve.run` out of the steps (cleaner.py)
and deploys the apps the Kubernetes way instead: `kubectl apply -f rayservice.yaml`.
Its cluster is the pipeline's own (`raycluster_spec`: the notebook's image, GPUs and
workers, Ray's token auth), its `serveConfigV2` lists each app with the import path of
its module-level name in notebook.py (serve_apps.py puts it there).
"""

from __future__ import annotations

from typing import Any

import yaml

from .cluster import PIPELINE_LABEL, ClusterTarget, raycluster_spec
from .model import Analysis, ServeApp

FILE = "rayservice.yaml"
_DNS_LABEL_MAX = 40  # KubeRay names the cluster and Services after it, with suffixes


def to_yaml(value: Any) -> str:
    """YAML that reads back as `value` whatever its strings hold (the notebook's app names
    and routes): PyYAML quotes and escapes what YAML could not hold plain."""
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=False, width=100)


def rayservice_name(pipeline: str) -> str:
    """A DNS-1035 label: pipeline names are [a-z0-9_], starting with a letter."""
    name = pipeline.replace("_", "-")[:_DNS_LABEL_MAX].strip("-")
    return name if name[:1].isalpha() else f"serve-{name}"[:_DNS_LABEL_MAX].rstrip("-")


def import_path(package: str, app: ServeApp) -> str:
    return f"{package}.notebook:{app.variable}"


def serve_config(a: Analysis, package: str) -> dict[str, Any]:
    """Serve's multi-application config (what `serve build` writes), one entry per app."""
    apps: list[dict[str, Any]] = []
    for app in a.serve_apps:
        entry: dict[str, Any] = {
            "name": app.name,
            "route_prefix": app.route_prefix,
            "import_path": import_path(package, app),
        }
        if a.requirements:  # as cluster.WORKER_REQUIREMENTS gives them to the RayJobs
            entry["runtime_env"] = {"pip": list(a.requirements)}
        apps.append(entry)
    return {"applications": apps}


def rayservice_manifest(a: Analysis, target: ClusterTarget, pipeline: str) -> dict[str, Any]:
    cluster = raycluster_spec(target, pipeline)
    # A RayService's workers take traffic once Ready: KubeRay's own readiness probe for
    # them also asks the Serve proxy (and drops them at its first failure). It gives it
    # only to a container without one, so theirs goes (raylab's is for a quick start).
    for group in cluster.get("workerGroupSpecs", []):
        group["template"]["spec"]["containers"][0].pop("readinessProbe", None)
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayService",
        "metadata": {
            "name": rayservice_name(pipeline),
            "namespace": target.namespace,
            "labels": {PIPELINE_LABEL: pipeline},
        },
        "spec": {
            "serveConfigV2": to_yaml(serve_config(a, pipeline)),
            "rayClusterConfig": cluster,
        },
    }


def rayservice_yaml(a: Analysis, target: ClusterTarget, pipeline: str) -> str:
    header = (
        f"# The Serve apps of {pipeline}'s notebook, exported by raylab: see EXPORT.md.\n"
        "# kubectl apply -f rayservice.yaml\n"
    )
    return header + to_yaml(rayservice_manifest(a, target, pipeline))
