"""`raylab usage` (the same verb as `%raycluster usage`): the GPU-hours table each user
reads in a shell, over the local backend's ledgers.

Each user sees their own rows; `--all` is an admin's (c.Raylab.admin_users, from the
jupyter_server_config.py the CLI reads), and anyone else is told so in one line. A
ledger is its own user's word about their own clusters only: what it says of a cluster
that exists is checked against the cluster (its owner), whoever reads it. The same
ledgers through the REST endpoint: tests/security/test_ledger_owners.py.

One real local cluster (a head alone) gives alice a cluster that exists.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.model import ClusterInfo
from raylab.service import ClusterService
from tests.ledgers import HOUR, interval, ledgers_put_back, write_ledger

ROOT = Path(__file__).resolve().parents[2]
T0 = time.time() - 3 * HOUR  # well inside the verb's default 7 days
HEADER = ["USER", "GPU", "TYPE", "CLUSTERS", "GPU-HOURS", "USED", "USED/HELD"]
GONE = {"alice": "local-deleted-of-alice", "bob": "local-deleted-of-bob"}


@pytest.fixture(scope="module")
def alices(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterInfo]:
    """Alice's cluster, and the ledgers alice and bob wrote (put back afterwards)."""
    settings = Settings.from_config()
    state_dir = settings.local_state_dir()
    service = ClusterService(LocalBackend(state_dir), settings, "alice")
    with ledgers_put_back(state_dir, ("alice", "bob")):
        info, _ = service.create({"name": "usage-alice", "workers": 0, "cpus": "1"})
        try:
            write_ledger(state_dir, "alice", [
                interval(info, "alice", 1, T0, T0 + HOUR),  # 1 GPU-hour
                interval(GONE["alice"], "alice", 2, T0, T0 + HOUR / 2),  # 1 GPU-hour
            ])  # fmt: skip
            write_ledger(state_dir, "bob", [
                interval(GONE["bob"], "bob", 3, T0, T0 + HOUR),  # his own: 3 GPU-hours
                interval(info, "alice", 1, T0 + HOUR, T0 + 2 * HOUR),  # billed to alice
                interval(info, "bob", 4, T0, T0 + HOUR),  # her cluster, claimed as his
            ])  # fmt: skip
            yield info
        finally:
            service.delete(info.name)


@pytest.fixture(scope="module")
def config_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The admin's jupyter_server_config.py, as the CLI reads it."""
    folder = tmp_path_factory.mktemp("jupyter-config")
    (folder / "jupyter_server_config.py").write_text('c.Raylab.admin_users = ["admin"]\n')
    return folder


def raylab(user: str, config_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`raylab usage ARGS` in a shell of `user` (JupyterHub's JUPYTERHUB_USER)."""
    env = {**os.environ, "JUPYTERHUB_USER": user, "JUPYTER_CONFIG_DIR": str(config_dir)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "raylab.cli", "usage", *args, "--backend", "local"]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                          check=False)  # fmt: skip


def table(done: subprocess.CompletedProcess[str]) -> list[list[str]]:
    """The table's rows, split into words (the header's "GPU TYPE" is two)."""
    assert done.returncode == 0, done.stderr
    first, *rows = done.stdout.splitlines()
    assert first.startswith("GPU-hours since "), done.stdout
    assert first.endswith(":"), done.stdout
    return [row.split() for row in rows]


def test_each_user_sees_their_own_gpu_hours(alices: ClusterInfo, config_dir: Path) -> None:
    # Bob's ledger billing alice for her cluster does not count: it vouches for bob only.
    assert table(raylab("alice", config_dir)) == [HEADER, ["alice", "a100", "2", "2.00", "—", "—"]]
    header, *rows = table(raylab("bob", config_dir))
    assert header == HEADER
    assert [row[0] for row in rows] == ["bob"]


def test_a_claim_on_another_users_cluster_does_not_count_for_its_writer(
    alices: ClusterInfo, config_dir: Path
) -> None:
    assert table(raylab("bob", config_dir)) == [HEADER, ["bob", "a100", "1", "3.00", "—", "—"]]


def test_all_is_refused_to_a_user_who_is_not_an_admin(
    alices: ClusterInfo, config_dir: Path
) -> None:
    done = raylab("alice", config_dir, "--all")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "raylab: error: --all shows every user's GPU-hours: for admins only"
    ]


def test_an_admin_sees_everyones_with_a_total(alices: ClusterInfo, config_dir: Path) -> None:
    assert table(raylab("admin", config_dir, "--all")) == [
        HEADER,
        ["alice", "a100", "2", "2.00", "—", "—"],
        ["bob", "a100", "1", "3.00", "—", "—"],
        ["total", "3", "5.00", "—", "—"],
    ]
    # Without --all, an admin's own (none).
    done = raylab("admin", config_dir)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("No GPU-hours since ")
