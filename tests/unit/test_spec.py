"""ClusterSpec: every field's validation, with the message a user would read."""

from __future__ import annotations

from typing import Any

import pytest

from raylab.errors import SpecError
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec, parse_quantity

PROFILES = Profiles()


def spec(**fields: Any) -> ClusterSpec:
    return ClusterSpec.from_mapping(fields, PROFILES)


def refused(field: str, **fields: Any) -> str:
    with pytest.raises(SpecError) as err:
        spec(**fields)
    assert err.value.field == field
    return err.value.reason


def test_defaults_come_from_the_profiles() -> None:
    s = spec(gpus=4, workers=2)
    a100 = PROFILES.gpu_types["a100"]
    assert (s.gpu_type, s.gpus_per_worker) == ("a100", 2)
    assert (s.cpus, s.memory) == (a100.default_cpus, a100.default_memory)
    assert s.name.startswith("ray-")
    assert len(s.name) == 9
    assert not s.autoscaling


def test_no_gpus_means_the_cpu_profile() -> None:
    s = spec()
    assert s.gpus == 0
    assert s.gpu_type == "cpu"
    assert s.workers == PROFILES.defaults.workers


def test_strings_from_the_command_line_are_accepted() -> None:
    s = spec(gpus="4", workers="2", cpus="16", memory="64Gi", name="exp-1")
    assert (s.gpus, s.workers, s.cpus, s.memory, s.name) == (4, 2, "16", "64Gi", "exp-1")


@pytest.mark.parametrize("value", [-1, "-1", "2.5", 2.5, "two", True, [], 10**9, "¹", "٣"])
def test_gpus_must_be_a_whole_number_in_range(value: Any) -> None:
    reason = refused("gpus", gpus=value)
    assert "whole number" in reason or "out of range" in reason


def test_uneven_split_says_what_would_work() -> None:
    reason = refused("gpus", gpus=4, workers=3)
    assert reason.startswith("4 GPUs cannot be split evenly across 3 workers")
    assert "--gpus 3 or 6" in reason
    assert "--workers 1, 2, 4" in reason


def test_gpus_need_workers_and_a_gpu_profile() -> None:
    assert "at least one worker" in refused("workers", gpus=2, workers=0)
    assert "has no GPUs" in refused("gpus", gpus=2, gpu_type="cpu")


def test_more_gpus_per_worker_than_a_node_has() -> None:
    reason = refused("gpus", gpus=16, workers=1, gpu_type="a100")
    assert "at most 8" in reason
    assert "--workers 2" in reason


def test_unknown_gpu_type_lists_the_known_ones() -> None:
    reason = refused("gpu_type", gpu_type="v100", gpus=1)
    assert "'v100'" in reason
    assert "a100, h100, l4, cpu" in reason


@pytest.mark.parametrize(
    "name",
    ["Has-Caps", "-lead", "trail-", "under_score", "dot.ted", "a" * 41, "", "x y", "é", "a;rm"],
)
def test_bad_names_are_refused(name: str) -> None:
    reason = refused("name", name=name)
    assert "valid name" in reason or "longer than 40" in reason or "required" in reason


def test_forty_character_name_is_fine() -> None:
    assert spec(name="a" * 40).name == "a" * 40


@pytest.mark.parametrize("memory", ["64GB", "lots", "-1Gi", "0", "1e3Gi", "64 Gi", "Gi"])
def test_bad_memory(memory: str) -> None:
    reason = refused("memory", memory=memory)
    assert "quantity" in reason or "more than zero" in reason


def test_memory_without_unit_is_bytes_and_too_small() -> None:
    assert "did you mean 64Gi" in refused("memory", memory="64")


@pytest.mark.parametrize("cpus", ["0", "abc", "100000"])
def test_bad_cpus(cpus: str) -> None:
    refused("cpus", cpus=cpus)


def test_quantities() -> None:
    assert parse_quantity("500m") == parse_quantity("0.5")
    assert parse_quantity("64Gi") == 64 * 2**30
    assert parse_quantity("1G") == 10**9
    with pytest.raises(ValueError, match="1e3"):
        parse_quantity("1e3")


@pytest.mark.parametrize(
    "image", ["rayproject/ray:2.60.0-py311-gpu", "registry.local:5000/team/ray:v1", "ray"]
)
def test_good_images(image: str) -> None:
    assert spec(image=image).image == image


@pytest.mark.parametrize("image", ["ray:latest; rm -rf /", "UPPER/ray", "a b", "ray:" + "x" * 200])
def test_bad_images(image: str) -> None:
    assert "image reference" in refused("image", image=image)


def test_autoscaling_range() -> None:
    s = spec(workers=1, min_workers=0, max_workers=4)
    assert (s.min_workers, s.max_workers, s.autoscaling) == (0, 4, True)
    assert "more than max" in refused("min_workers", min_workers=5, max_workers=2, workers=3)
    assert "outside the autoscaling range" in refused("workers", workers=5, max_workers=4)


def test_unknown_field_is_named() -> None:
    assert "unknown field" in refused("gpu", gpu=4)


def test_not_an_object() -> None:
    with pytest.raises(SpecError) as err:
        ClusterSpec.from_mapping(["gpus"], PROFILES)  # type: ignore[arg-type]
    assert err.value.field == "body"


def test_scaling_keeps_gpus_per_worker() -> None:
    s = spec(gpus=4, workers=2).with_workers(3)
    assert (s.workers, s.gpus, s.gpus_per_worker) == (3, 6, 2)
