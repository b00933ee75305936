"""The notebook's cluster spec -> dagster-ray resources, read back through dagster-ray itself.

The generated package is imported here (dagster and dagster-ray come with raylab's dev
extras): the production resource must carry the GPUs, workers, image, node selectors and
tolerations, with snake_case `RayClusterSpec` fields and camelCase Kubernetes objects.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import dagster as dg
import pytest

from raylab.config import Settings
from raylab.export import export_notebook
from raylab.export.errors import ExportError
from raylab.model import ClusterInfo, Endpoints, Phase
from raylab.spec import ClusterSpec
from raylab.versions import kernel_versions

from .support import make_notebook

SETTINGS = Settings.from_config()
RAY, PYTHON = kernel_versions()


def info(**fields: Any) -> ClusterInfo:
    spec = ClusterSpec.from_mapping({"name": "train", **fields}, SETTINGS.profiles)
    return ClusterInfo(
        name="train", owner="alice", backend="kuberay", phase=Phase.READY, spec=spec,
        namespace="ml", endpoints=Endpoints(client="ray://x:10001"),
    )  # fmt: skip


@pytest.fixture
def load(tmp_path: Path) -> Iterator[Any]:
    """Export a one-cell notebook for a cluster and import the generated package."""
    loaded: list[str] = []

    def load(name: str, cluster: ClusterInfo | None) -> dict[str, ModuleType]:
        nb = make_notebook(tmp_path / f"{name}.ipynb", ["import ray\nx = 1\nx"])
        result = export_notebook(nb, settings=SETTINGS, cluster=cluster)
        sys.path.insert(0, str(result.out_dir))
        loaded.append(name)
        return {m: importlib.import_module(f"{name}.{m}") for m in ("cluster", "resources",
                "definitions")}  # fmt: skip

    yield load
    for name in loaded:
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]
    sys.path[:] = [p for p in sys.path if not p.startswith(str(tmp_path))]


def test_gpu_cluster_becomes_a_kuberay_interactive_job(load: Any) -> None:
    from dagster_ray.kuberay import KubeRayInteractiveJob

    m = load("gpu_mapping", info(gpus=4, gpu_type="a100", workers=2))
    cluster, resources = m["cluster"], m["resources"]
    fields = cluster.RAY_CLUSTER_SPEC
    assert set(fields) == {"ray_version", "head_group_spec", "worker_group_specs"}
    assert "rayStartParams" in fields["head_group_spec"]  # camelCase inside
    job = resources.production_ray()
    assert isinstance(job, KubeRayInteractiveJob)
    assert job.image == cluster.IMAGE == f"rayproject/ray:{RAY}-py{PYTHON.replace('.', '')}-gpu"
    assert job.timeout > 600
    assert job.lifecycle.cleanup == "on_exception"
    assert job.ray_job.metadata == {
        "namespace": "ml",
        "labels": {"raylab.io/pipeline": "gpu_mapping"},
    }

    manifest = resources.rayjob_manifest()
    assert "name" not in manifest["metadata"]
    assert manifest["spec"]["submissionMode"] == "InteractiveMode"
    spec = manifest["spec"]["rayClusterSpec"]
    assert spec["rayVersion"] == RAY
    (group,) = spec["workerGroupSpecs"]
    assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 2)
    pod = group["template"]["spec"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits == {"cpu": "12", "memory": "96Gi", "nvidia.com/gpu": "2"}
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists",
                                   "effect": "NoSchedule"}]  # fmt: skip
    assert group["rayStartParams"] == {
        "num-gpus": "2",
        "node-manager-port": "8076",
        "object-manager-port": "8077",
    }
    labels = group["template"]["metadata"]["labels"]
    assert "raylab.io/owner" not in labels
    assert labels["raylab.io/pipeline"] == "gpu_mapping"
    head = spec["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert head["image"] == cluster.IMAGE
    assert "nvidia.com/gpu" not in head["resources"]["limits"]
    assert {p["containerPort"] for p in head["ports"]} >= {10001}  # Ray Client, as RayResource
    # Ray's token auth, from the pipeline's Secret, on every Ray container.
    assert cluster.TOKEN_SECRET == "gpu-mapping-ray-token"
    for container in (head, pod["containers"][0]):
        auth = {e["name"]: e for e in container["env"] if e["name"].startswith("RAY_AUTH")}
        assert auth["RAY_AUTH_MODE"]["value"] == "token"
        ref = auth["RAY_AUTH_TOKEN"]["valueFrom"]["secretKeyRef"]
        assert ref == {"name": "gpu-mapping-ray-token", "key": "auth_token"}
    dg.Definitions.validate_loadable(m["definitions"].defs)


def test_autoscaling_cluster_keeps_its_range(load: Any) -> None:
    m = load("auto_mapping", info(gpus=2, gpu_type="l4", workers=1, min_workers=0,
                                  max_workers=3, idle_timeout_minutes=5))  # fmt: skip
    fields = m["cluster"].RAY_CLUSTER_SPEC
    assert fields["enable_in_tree_autoscaling"] is True
    assert fields["autoscaler_options"]["idleTimeoutSeconds"] == 300
    spec = m["resources"].rayjob_manifest()["spec"]["rayClusterSpec"]
    assert spec["enableInTreeAutoscaling"] is True
    group = spec["workerGroupSpecs"][0]
    assert (group["minReplicas"], group["maxReplicas"]) == (0, 3)


def test_switch_between_kuberay_and_local(load: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from dagster_ray import LocalRay
    from dagster_ray.kuberay import KubeRayInteractiveJob

    m = load("switch", info(gpus=2, workers=1))
    resources = m["resources"]
    monkeypatch.setenv("RAYLAB_RAY_NAMESPACE", "prod")
    assert resources.production_ray().ray_job.metadata["namespace"] == "prod"
    assert isinstance(resources.ray_resource(), KubeRayInteractiveJob)
    monkeypatch.setenv("RAYLAB_RAY_BACKEND", "local")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    local = resources.ray_resource()
    assert isinstance(local, LocalRay)
    assert local.ray_address == "local"  # never some other Ray found on the machine
    assert local.ray_init_options["num_gpus"] == 2
    env = local.ray_init_options["runtime_env"]
    assert env["py_modules"] == [str(Path(resources.__file__).parent)]
    monkeypatch.setenv("RAY_ADDRESS", "ray://127.0.0.1:10001")
    attached = resources.local_ray()
    assert attached.ray_address == "ray://127.0.0.1:10001"
    assert "num_gpus" not in attached.ray_init_options
    monkeypatch.setenv("RAYLAB_RAY_BACKEND", "gke")
    with pytest.raises(ValueError, match="use kuberay or local"):
        resources.ray_resource()


def test_no_cluster_means_the_defaults(load: Any) -> None:
    m = load("defaults", None)
    assert m["cluster"].GPUS == 0
    assert f"rayproject/ray:{RAY}-py{PYTHON.replace('.', '')}" == m["cluster"].IMAGE


def test_an_image_for_another_ray_is_refused(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "nb.ipynb", ["x = 1"])
    with pytest.raises(ExportError, match="would not connect"):
        export_notebook(nb, settings=SETTINGS, cluster=info(image="rayproject/ray:2.9.0-py310"))
    assert not (tmp_path / "nb_pipeline").exists()
