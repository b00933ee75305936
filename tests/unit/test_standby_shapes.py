"""The rules of standby clusters that need no cluster (raylab/standby/shapes.py): the
admin's shapes, which request a standby serves, which standby may be claimed, and the
machine check. The standbys themselves run for real in tests/local/test_standby.py."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any

import pytest

from raylab.config import Settings
from raylab.display.render import phase_text
from raylab.errors import SpecError
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec
from raylab.standby import same_shape, standby_specs, unusable
from raylab.standby.shapes import machine_refuses
from raylab.versions import kernel_versions


def specs(standby: dict[str, Any]) -> list[ClusterSpec]:
    return standby_specs(Settings.from_config(standby=standby))


def test_each_gpu_type_names_one_shape_with_a_generated_name() -> None:
    (a100, cpu) = specs({"cpu": {"workers": 0, "cpus": "1"}, "a100": {"gpus": 2, "workers": 2}})
    assert (a100.gpu_type, a100.gpus, a100.workers) == ("a100", 2, 2)
    assert (cpu.gpu_type, cpu.workers) == ("cpu", 0)
    assert a100.name.startswith("ray-")


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ({"name": "mine"}, "c.Raylab.standby['a100'] cannot set 'name': the key names it"),
        ({"gpu_type": "l4"}, "c.Raylab.standby['a100'] cannot set 'gpu_type'"),
        ({"gpus": "many"}, "c.Raylab.standby['a100']: "),
        ({"colour": "red"}, "c.Raylab.standby['a100']: colour: unknown field 'colour'"),
    ],
)
def test_a_shape_up_would_refuse_is_refused_naming_it(shape: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        specs({"a100": shape})
    assert message in caught.value.message


def test_a_standby_serves_only_its_own_shape() -> None:
    settings = Settings.from_config()
    asked = ClusterSpec.from_mapping({"gpus": 2, "workers": 2}, settings.profiles)
    (standby,) = specs({"a100": {"gpus": 2, "workers": 2}})
    assert standby.name != asked.name
    assert same_shape(standby, asked)
    assert not same_shape(standby, replace(asked, cpus="2"))
    assert not same_shape(standby, replace(asked, idle_suspend_minutes=10.0))


def standby_info(**changes: Any) -> ClusterInfo:
    ray_here, python_here = kernel_versions()
    (spec,) = specs({"cpu": {"workers": 0, "cpus": "1"}})
    info = ClusterInfo(spec.name, "ann", "local", Phase.READY, spec, head_ready=True,
                       ray_version=ray_here, python_version=python_here,
                       standby_until=time.time() + 600)  # fmt: skip
    return replace(info, **changes)


def test_which_standby_may_be_claimed() -> None:
    assert unusable(standby_info()) is None
    assert unusable(standby_info(phase=Phase.STARTING)) is None  # still faster than cold
    failed = standby_info(phase=Phase.FAILED, reason="head process exited: killed")
    assert unusable(failed) == "is Failed: head process exited: killed"
    assert unusable(standby_info(standby_until=time.time() - 1)) == "reached the end of its time"
    older = unusable(standby_info(ray_version="2.0.0"))
    assert older == f"runs Ray 2.0.0, this kernel Ray {kernel_versions()[0]}"
    other_python = unusable(standby_info(python_version="3.9"))
    assert other_python == f"runs Python 3.9, this kernel Python {kernel_versions()[1]}"


def test_a_standby_says_so_wherever_it_shows() -> None:
    at = time.mktime((2026, 12, 5, 14, 5, 0, 0, 0, -1))
    info = standby_info(standby_until=at, phase=Phase.STARTING, reason="starting the head")
    text = phase_text(info, now=at - 60)
    assert text == "Starting — standby until 14:05; starting the head"
    assert phase_text(replace(info, standby_until=None), now=at) == "Starting — starting the head"


def test_the_local_machine_check_names_what_is_short() -> None:
    few_cores = Settings.from_config(standby_min_cores=10**6)
    assert "under standby_min_cores (1000000)" in (machine_refuses(few_cores, "local") or "")
    little_memory = Settings.from_config(standby_min_cores=0, standby_min_free_gib=10.0**9)
    refused = machine_refuses(little_memory, "local") or ""
    assert "GiB of memory is free here, under standby_min_free_gib (1e+09)" in refused
    # A KubeRay standby takes the namespace's quota, not this machine's cores.
    assert machine_refuses(few_cores, "kuberay") is None
