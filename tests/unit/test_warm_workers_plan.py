"""Which workers the kernel starts on connect (kernel/warm_workers.py): one per GPU first,
then one per CPU left, never on the driver's own node nor on one that is gone."""

from __future__ import annotations

from typing import Any

from raylab.kernel.warm_workers import MAX_PER_NODE, plan


def node(node_id: str, cpus: float = 0, gpus: float = 0, alive: bool = True) -> dict[str, Any]:
    resources = {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_gpu_workers_first_then_the_cpus_left() -> None:
    nodes = [node("gpu", cpus=4, gpus=1), node("cpu", cpus=2), node("small", cpus=1, gpus=2)]
    assert plan(nodes, None, 64) == {"gpu": (1, 3), "cpu": (0, 2), "small": (1, 0)}


def test_the_driver_node_dead_nodes_and_nodes_without_cpus_are_left() -> None:
    nodes = [
        node("head", cpus=0),
        node("driver", cpus=8),
        node("gone", cpus=8, alive=False),
        node("worker", cpus=2),
    ]
    assert plan(nodes, "driver", 64) == {"worker": (0, 2)}


def test_a_large_node_gets_at_most_the_cap() -> None:
    assert plan([node("big", cpus=96, gpus=8)], None, 64) == {"big": (MAX_PER_NODE, 0)}
    assert plan([node("big", cpus=96, gpus=2)], None, 64) == {"big": (2, MAX_PER_NODE - 2)}
    assert plan([node("frac", cpus=0.5)], None, 64) == {}


def test_the_limit_takes_every_node_s_gpu_workers_first() -> None:
    """A local cluster's nodes share the kernel's machine: at most its cores in all."""
    nodes = [node("a", cpus=8, gpus=1), node("b", cpus=8, gpus=1)]
    assert plan(nodes, None, 2) == {"a": (1, 0), "b": (1, 0)}
    assert plan(nodes, None, 3) == {"a": (1, 1), "b": (1, 0)}
    assert plan(nodes, None, 0) == {}
