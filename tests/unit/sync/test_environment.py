"""The environment a cluster remembers: its one-line summary (and the sizes in it), and
the RayCluster annotation it is read back from."""

from __future__ import annotations

import pytest

from raylab.backends.kuberay.manifest import ENVIRONMENT_ANNOTATION as ANNOTATION
from raylab.backends.kuberay.status import cluster_info
from raylab.display import render
from raylab.model import ClusterEnvironment, format_size


@pytest.mark.parametrize(
    ("size", "text"),
    [
        (0, "0 B"),
        (1023, "1023 B"),
        (1024, "1.0 KiB"),
        (1280, "1.3 KiB"),  # half up, as render.ts does (Python's format would say 1.2)
        (int(3.2 * 2**20), "3.2 MiB"),
        (2**20 - 50, "1.0 MiB"),  # never "1024.0 KiB"
        (100 * 2**20, "100.0 MiB"),
        (5 * 2**30, "5.0 GiB"),
    ],
)
def test_format_size(size: int, text: str) -> None:
    assert format_size(size) == text


def test_environment_summary_wording() -> None:
    env = ClusterEnvironment(
        working_dir="/nb", working_dir_bytes=int(3.2 * 2**20), pip=("a", "b", "c", "d"),
        env_names=("X", "Y"),
    )  # fmt: skip
    assert render.environment_text(env) == "working dir 3.2 MiB · 4 pip packages · 2 env vars"
    one = ClusterEnvironment(pip=("a",), env_names=("X",), local_packages=("p",))
    assert render.environment_text(one) == "1 local package · 1 pip package · 1 env var"
    assert render.environment_text(ClusterEnvironment()) == "nothing synced"


def test_the_raycluster_annotation_is_read_back() -> None:
    env = ClusterEnvironment(working_dir="/home/u/nb", working_dir_bytes=5, pip=("x",),
                             env_names=("TOKEN",))  # fmt: skip
    obj = {
        "metadata": {"name": "c1", "namespace": "ml",
                     "annotations": {ANNOTATION: env.to_annotation()}},
        "spec": {"workerGroupSpecs": [{"replicas": 1}]},
    }  # fmt: skip
    assert cluster_info(obj).environment == env
    obj["metadata"]["annotations"][ANNOTATION] = "{not json"  # type: ignore[index]
    assert cluster_info(obj).environment is None
