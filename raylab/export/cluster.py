"""The cluster a pipeline runs on: the notebook's cluster spec as dagster-ray config.

The RayCluster comes from `raycluster_manifest`, the same function the KubeRay backend
creates the notebook's clusters with, so the pipeline gets the same image, GPUs, node
selectors and tolerations. dagster-ray's `RayClusterSpec` takes snake_case top-level
fields whose values are ordinary camelCase Kubernetes dicts: each top-level key of the
manifest's `spec` is renamed (`headGroupSpec` -> `head_group_spec`), nothing inside it.
A raw camelCase manifest would validate at load time and fail when the cluster is made.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from ..backends.kuberay.manifest import (
    MANAGED_BY_LABEL,
    OWNER_LABEL,
    raycluster_manifest,
    versions_from_image,
)
from ..backends.kuberay.manifest_security import auth_env, secret_name
from ..config import Settings
from ..model import ClusterInfo
from ..profiles import GpuProfile
from ..spec import ClusterSpec
from ..versions import default_image, kernel_versions
from .errors import ExportError

PIPELINE_LABEL = "raylab.io/pipeline"
# GPU node pools often scale up from zero: minutes, more than dagster-ray's 600 s default.
READY_TIMEOUT = 1800.0
# The RayClusterSpec fields raylab's manifests use (checked, so a new manifest field is
# never silently dropped on its way into the pipeline).
KNOWN_FIELDS = frozenset(
    {"ray_version", "head_group_spec", "worker_group_specs", "enable_in_tree_autoscaling",
     "autoscaler_options"}
)  # fmt: skip
_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@dataclass(frozen=True)
class ClusterTarget:
    spec: ClusterSpec
    profile: GpuProfile
    source: str  # for the report: where the spec came from
    namespace: str
    image: str
    ray_version: str
    python_version: str
    service_account: str | None
    head_cpus: str
    head_memory: str

    @property
    def gpu_resource(self) -> str:
        return self.profile.resource_key


def target_for(info: ClusterInfo | None, settings: Settings, source: str) -> ClusterTarget:
    """The pipeline's cluster: `info`'s spec, else the configured defaults."""
    profiles = settings.profiles
    spec = info.spec if info else ClusterSpec.from_mapping({"name": "pipeline"}, profiles)
    profile = profiles.get(spec.gpu_type)
    if profile is None:
        raise ExportError(
            f"cluster {spec.name!r} uses GPU type {spec.gpu_type!r}, which is no longer configured",
            detail=f"configured types: {', '.join(profiles.gpu_types)}",
        )
    # The pipeline's driver is this kernel's environment, pinned: Ray Client needs the
    # cluster's Ray and Python to match it exactly.
    ray_version, python_version = kernel_versions()
    image = spec.image or profiles.defaults.image
    if image:
        tag_ray, tag_python = versions_from_image(image)
        if (tag_ray and tag_ray != ray_version) or (tag_python and tag_python != python_version):
            raise ExportError(
                f"image {image} has Ray {tag_ray} / Python {tag_python}, this kernel Ray "
                f"{ray_version} / Python {python_version}; the pipeline would not connect",
                detail=f"use an image such as {default_image(ray_version, python_version)}",
            )
    else:  # as the KubeRay backend does: rayproject/ray matching the kernel, -gpu for GPUs
        image = default_image(ray_version, python_version) + ("-gpu" if spec.gpus else "")
    return ClusterTarget(
        spec=spec,
        profile=profile,
        source=source,
        namespace=(info.namespace if info and info.namespace else _namespace(settings)),
        image=image,
        ray_version=ray_version,
        python_version=python_version,
        service_account=settings.options.service_account or None,
        head_cpus=profiles.defaults.head_cpus,
        head_memory=profiles.defaults.head_memory,
    )


def _namespace(settings: Settings) -> str:
    template = settings.options.namespace_template
    if template and "{" not in template:
        return template
    return "default"  # a per-user template cannot be resolved for a pipeline: the admin sets it


def token_secret_name(pipeline: str) -> str:
    """The Secret (key `auth_token`) whose token every run's cluster checks: one per
    pipeline, made once where the RayJobs run (EXPORT.md says how). Pipeline names are
    Python identifiers; Kubernetes names take `-` where they have `_`."""
    return secret_name(pipeline.replace("_", "-").lower())


def raycluster_spec(target: ClusterTarget, pipeline: str) -> dict[str, Any]:
    """The target cluster's RayCluster `spec` (Kubernetes' camelCase), with Ray's token
    auth on, as on the notebook's clusters, its pods labelled with the pipeline. The
    pipeline's RayJobs and its RayService (rayservice.yaml) both take it."""
    manifest = raycluster_manifest(
        target.spec,
        target.profile,
        owner=pipeline,
        namespace=target.namespace,
        image=target.image,
        ray_version=target.ray_version,
        python_version=target.python_version,
        service_account=target.service_account,
        head_cpus=target.head_cpus,
        head_memory=target.head_memory,
        ray_env=auth_env(token_secret_name(pipeline)),
    )
    spec: dict[str, Any] = copy.deepcopy(manifest["spec"])
    for group in [spec["headGroupSpec"], *spec.get("workerGroupSpecs", [])]:
        _relabel(group["template"].setdefault("metadata", {}), pipeline)
    return spec


def ray_cluster_spec(target: ClusterTarget, pipeline: str) -> dict[str, Any]:
    """dagster-ray `RayClusterSpec` keyword arguments for the target cluster (see
    `raycluster_spec`)."""
    fields = {_snake(key): value for key, value in raycluster_spec(target, pipeline).items()}
    unknown = sorted(set(fields) - KNOWN_FIELDS)
    if unknown:  # a bug, not a user error: say which field needs mapping
        raise AssertionError(f"RayCluster fields without a RayClusterSpec mapping: {unknown}")
    return fields


def _relabel(metadata: dict[str, Any], pipeline: str) -> None:
    """Pipeline pods are not a person's raylab cluster: no owner, no managed-by raylab."""
    labels = metadata.setdefault("labels", {})
    for key in (MANAGED_BY_LABEL, OWNER_LABEL):
        labels.pop(key, None)
    labels[PIPELINE_LABEL] = pipeline


def _snake(camel: str) -> str:
    return _CAMEL.sub("_", camel).lower()
