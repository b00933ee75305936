"""How many worker processes a local worker node may start at once: Ray's rule (as many
as the machine has cores) shared among the nodes, which all run on this machine."""

from __future__ import annotations

import pytest

from raylab.backends.local.backend import startup_concurrency


@pytest.mark.parametrize(
    ("cores", "nodes", "each"),
    [(2, 2, 1), (2, 1, 2), (16, 2, 8), (16, 3, 5), (2, 8, 1), (4, 0, 4), (1, 1, 1)],
)
def test_the_cores_are_shared_and_each_node_starts_at_least_one(
    monkeypatch: pytest.MonkeyPatch, cores: int, nodes: int, each: int
) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert startup_concurrency(nodes) == each


def test_an_unknown_core_count_counts_as_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: None)
    assert startup_concurrency(2) == 1
