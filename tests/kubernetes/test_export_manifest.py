"""An exported pipeline's RayJob, as dagster-ray builds it, accepted by the real API server.

Server-side dry runs with strict field validation against KubeRay's CRDs: every field
dagster-ray writes (from the RayClusterSpec the export maps the notebook's cluster to)
is one the CRD knows, and defaulting changes none of the GPUs, workers or image.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from controlplane import call_json
from kubernetes import client as k8s_client

from raylab.config import Settings
from raylab.export import export_notebook
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec
from tests.export.support import make_notebook

from .kuberay_support import RAY

SETTINGS = Settings.from_config()


@pytest.fixture
def pipeline(tmp_path: Path, namespace: str) -> Iterator[ModuleType]:
    spec = ClusterSpec.from_mapping(
        {"name": "train", "gpus": 4, "gpu_type": "a100", "workers": 2, "min_workers": 1,
         "max_workers": 3, "idle_timeout_minutes": 10},
        SETTINGS.profiles,
    )  # fmt: skip
    info = ClusterInfo(name="train", owner="alice", backend="kuberay", phase=Phase.READY,
                       spec=spec, namespace=namespace)  # fmt: skip
    nb = make_notebook(tmp_path / "dry_run_export.ipynb", ["import ray\nx = 1\nx"])
    result = export_notebook(nb, settings=SETTINGS, cluster=info)
    sys.path.insert(0, str(result.out_dir))
    try:
        yield importlib.import_module("dry_run_export.resources")
    finally:
        sys.path.remove(str(result.out_dir))
        for name in [m for m in sys.modules if m.startswith("dry_run_export")]:
            del sys.modules[name]


def test_rayjob_and_raycluster_pass_a_server_side_dry_run(
    admin_api: k8s_client.ApiClient, namespace: str, pipeline: ModuleType
) -> None:
    custom = k8s_client.CustomObjectsApi(admin_api)
    rayjob = pipeline.rayjob_manifest()
    assert rayjob["metadata"].get("name") is None  # dagster-ray names each run's RayJob
    rayjob["metadata"]["name"] = "dg-dev-run-1234"  # as dagster-ray would
    stored = call_json(
        custom.create_namespaced_custom_object, *RAY, namespace, "rayjobs", rayjob,
        dry_run="All", field_validation="Strict",
    )  # fmt: skip
    spec = stored["spec"]["rayClusterSpec"]
    (group,) = spec["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 1, 3)
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    assert spec["enableInTreeAutoscaling"] is True
    assert stored["spec"]["submissionMode"] == "InteractiveMode"

    raycluster = {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": "dg-dev-run-1234", "namespace": namespace},
        "spec": rayjob["spec"]["rayClusterSpec"],
    }
    stored = call_json(
        custom.create_namespaced_custom_object, *RAY, namespace, "rayclusters", raycluster,
        dry_run="All", field_validation="Strict",
    )  # fmt: skip
    images = {
        c["image"]
        for g in [stored["spec"]["headGroupSpec"], *stored["spec"]["workerGroupSpecs"]]
        for c in g["template"]["spec"]["containers"]
    }
    assert images == {pipeline.cluster.IMAGE}
    for plural in ("rayjobs", "rayclusters"):  # a dry run stores nothing
        assert (
            call_json(custom.list_namespaced_custom_object, *RAY, namespace, plural)["items"] == []
        )
