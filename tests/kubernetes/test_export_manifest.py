"""An exported pipeline's RayJob, as dagster-ray builds it, and the RayService of a notebook's
Serve apps (rayservice.yaml), accepted by the real API server.

Server-side dry runs with strict field validation against KubeRay's CRDs: every field
dagster-ray writes (from the RayClusterSpec the export maps the notebook's cluster to),
and every field of rayservice.yaml, is one the CRD knows, and defaulting changes none of
the GPUs, workers, image or apps.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml
from controlplane import call_json
from kubernetes import client as k8s_client

from raylab.config import Settings
from raylab.export import export_notebook
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec
from raylab.versions import default_image, kernel_versions
from tests.export.support import make_notebook

from .kuberay_support import RAY

SETTINGS = Settings.from_config()


def gpu_cluster(namespace: str) -> ClusterInfo:
    spec = ClusterSpec.from_mapping(
        {"name": "train", "gpus": 4, "gpu_type": "a100", "workers": 2, "min_workers": 1,
         "max_workers": 3, "idle_timeout_minutes": 10},
        SETTINGS.profiles,
    )  # fmt: skip
    return ClusterInfo(name="train", owner="alice", backend="kuberay", phase=Phase.READY,
                       spec=spec, namespace=namespace)  # fmt: skip


@pytest.fixture
def pipeline(tmp_path: Path, namespace: str) -> Iterator[ModuleType]:
    info = gpu_cluster(namespace)
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


SERVE_CELLS = [
    "from ray import serve\n\n"
    '@serve.deployment(ray_actor_options={"num_gpus": 1})\n'
    "class Model:\n"
    "    def __call__(self, request):\n"
    '        return "hi"',
    "app = Model.bind()\nserve.run(app, name='model', route_prefix='/model', blocking=True)",
    # A name written as the notebook wrote it, quotes and YAML's own characters included.
    "serve.run(Model.options(num_replicas=2).bind(), name='b: \"{x}\" #1', route_prefix='/b')",
]


def test_rayservice_passes_a_server_side_dry_run(
    admin_api: k8s_client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    nb = make_notebook(tmp_path / "served_model.ipynb", SERVE_CELLS)
    result = export_notebook(nb, settings=SETTINGS, cluster=gpu_cluster(namespace))
    manifest = yaml.safe_load((result.out_dir / "rayservice.yaml").read_text())
    custom = k8s_client.CustomObjectsApi(admin_api)
    stored = call_json(
        custom.create_namespaced_custom_object, *RAY, namespace, "rayservices", manifest,
        dry_run="All", field_validation="Strict",
    )  # fmt: skip
    assert stored["metadata"]["name"] == "served-model"
    config = yaml.safe_load(stored["spec"]["serveConfigV2"])
    assert [(a["name"], a["route_prefix"], a["import_path"]) for a in config["applications"]] == [
        ("model", "/model", "served_model.notebook:app"),
        ('b: "{x}" #1', "/b", "served_model.notebook:serve_app"),
    ]
    cluster = stored["spec"]["rayClusterConfig"]
    (group,) = cluster["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 1, 3)
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"
    images = {
        c["image"]
        for g in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
        for c in g["template"]["spec"]["containers"]
    }
    assert images == {default_image(*kernel_versions()) + "-gpu"}  # the export's, for GPUs
    assert (
        call_json(custom.list_namespaced_custom_object, *RAY, namespace, "rayservices")["items"]
        == []
    )  # a dry run stores nothing
