"""Which workers the kernel starts on connect (kernel/warm_workers.py): one per CPU, up to
a cap and each node's share of the limit, GPU nodes first; never on the driver's own node
nor on one that is gone."""

from __future__ import annotations

from typing import Any

from raylab.kernel.warm_workers import MAX_PER_NODE, plan


def node(node_id: str, cpus: float = 0, gpus: float = 0, alive: bool = True) -> dict[str, Any]:
    resources = {"CPU": cpus, "GPU": gpus} if gpus else {"CPU": cpus}
    return {"NodeID": node_id, "Alive": alive, "Resources": resources}


def test_one_worker_per_cpu() -> None:
    nodes = [node("gpu", cpus=4, gpus=1), node("cpu", cpus=2), node("small", cpus=1, gpus=2)]
    assert plan(nodes, None, 64, 64) == {"gpu": 4, "cpu": 2, "small": 1}


def test_the_driver_node_dead_nodes_and_nodes_without_cpus_are_left() -> None:
    nodes = [
        node("head", cpus=0),
        node("driver", cpus=8),
        node("gone", cpus=8, alive=False),
        node("worker", cpus=2),
    ]
    assert plan(nodes, "driver", 64, 64) == {"worker": 2}


def test_a_large_node_gets_at_most_the_cap() -> None:
    assert plan([node("big", cpus=96, gpus=8)], None, 64, 64) == {"big": MAX_PER_NODE}
    assert plan([node("frac", cpus=0.5)], None, 64, 64) == {}


def test_each_node_gets_its_share_and_gpu_nodes_come_first() -> None:
    """A local cluster's nodes share the kernel's machine: at most its cores in all, and
    the first node to join does not take what the next one's first task needs."""
    nodes = [node("cpu", cpus=8), node("a", cpus=8, gpus=1), node("b", cpus=8, gpus=1)]
    assert plan(nodes, None, 2, 1) == {"a": 1, "b": 1}
    assert plan(nodes, None, 3, 1) == {"a": 1, "b": 1, "cpu": 1}
    assert plan(nodes[:2], None, 4, 2) == {"a": 2, "cpu": 2}
    assert plan(nodes, None, 0, 1) == {}
