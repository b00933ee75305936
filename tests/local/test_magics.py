"""`%raycluster` in a real IPython shell against real Ray processes (local backend).

One cluster serves the whole module (a Ray cluster takes ~20 s to start on two cores);
the tests run in file order, as a user's session would.
"""

from __future__ import annotations

import contextlib
import io
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from raylab.commands import Commands
from raylab.config import Settings
from raylab.identity import current_user
from raylab.kernel.connect import connected_cluster
from raylab.magics import NotebookOutput

NAME = "magic1"


def run(shell: InteractiveShell, line: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        shell.run_line_magic("raycluster", line)
    return out.getvalue()


def run_with_warnings(shell: InteractiveShell, line: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        shell.run_line_magic("raycluster", line)
    return out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def up_run(shell: InteractiveShell) -> Iterator[tuple[str, str]]:
    try:
        yield run_with_warnings(shell, f"up --name {NAME} --gpus 2 --workers 2 --cpus 1 "
                                       "--memory 1Gi")  # fmt: skip
    finally:  # also when `up` itself failed: the cluster is kept for inspection then
        with contextlib.suppress(UsageError):
            run(shell, f"down {NAME}")


@pytest.fixture(scope="module")
def up_output(up_run: tuple[str, str]) -> str:
    return up_run[0]


def test_up_says_once_that_the_gpus_are_logical(up_run: tuple[str, str]) -> None:
    warnings = [ln for ln in up_run[1].splitlines() if ln.startswith("Warning: ")]
    assert warnings == [
        "Warning: this machine has fewer GPUs than the 2 requested: the local backend "
        "declares them as logical GPUs (tasks get CUDA_VISIBLE_DEVICES, not a device)"
    ], up_run[1]


def test_up_shows_progress_and_connects(up_output: str) -> None:
    lines = up_output.splitlines()
    assert lines[0].startswith(f"{NAME}  ·  Starting"), up_output
    assert any("Ready  ·  2/2 workers ready  ·  GPUs 2 × a100 (logical)" in ln for ln in lines)
    assert f"Connected this kernel to {NAME}" in up_output
    assert connected_cluster() == NAME


def test_next_cell_uses_the_gpus(up_output: str) -> None:
    import ray

    assert ray.is_initialized()
    assert ray.cluster_resources()["GPU"] == 2
    assert len([n for n in ray.nodes() if n["Alive"]]) == 3  # head + 2 workers

    @ray.remote(num_gpus=1)
    def visible() -> str | None:
        import os

        return os.environ.get("CUDA_VISIBLE_DEVICES")

    assert ray.get(visible.remote()) == "0"


def test_list_and_status(shell: InteractiveShell, up_output: str) -> None:
    table = run(shell, "list")
    header, row = table.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "PHASE", "WORKERS"]
    assert row.split()[:3] == [NAME, "Ready", "2/2"]
    assert "2 × a100 (logical)" in row
    status = run(shell, "status")  # the connected cluster by default
    assert status.startswith(NAME)
    assert "Phase: Ready" in status
    assert "Workers: 2/2 ready" in status
    assert "Ray: 2.60" in status


def test_list_all_shows_owners_to_admins_only(up_output: str) -> None:
    def listed(user: str) -> list[str]:
        settings = Settings.from_config(admin_users=["root-admin"])
        commands = Commands(NotebookOutput(), prog="%raycluster", may_connect=False,
                            settings=settings, user=user)  # fmt: skip
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            commands.run_line("list --all")
        return out.getvalue().splitlines()

    header, *rows = listed("root-admin")
    assert header.split()[-1] == "OWNER"
    mine = next(r for r in rows if r.startswith(f"{NAME} "))
    assert mine.split()[-1] == current_user()
    note, table = listed("bob")[:2]
    assert note == ("Only admins (admin_users, admin_groups) see every user's clusters; "
                    "these are yours.")  # fmt: skip
    assert table.startswith("No clusters.")  # bob has none, and sees none of others'


def test_up_with_an_existing_name_reuses_it(shell: InteractiveShell, up_output: str) -> None:
    text = run(shell, f"up --name {NAME} --gpus 2 --workers 2")
    assert text.startswith(f"{NAME} already exists (Ready); using it.")
    assert connected_cluster() == NAME


def test_another_users_name_is_refused(up_output: str) -> None:
    bob = Commands(NotebookOutput(), prog="%raycluster", may_connect=True, user="bob")
    with pytest.raises(Exception, match=f"the name '{NAME}' is taken by another user's cluster"):
        bob.run_line(f"up --name {NAME}")
    with pytest.raises(Exception, match=f"no cluster named '{NAME}'"):
        bob.run_line(f"down {NAME}")  # and bob cannot delete it


def test_dashboard_serves_the_ray_dashboard(shell: InteractiveShell, up_output: str) -> None:
    link, note = run(shell, f"dashboard {NAME}").splitlines()
    url = link.split(": ", 1)[1].strip()
    assert url.startswith("http://127.0.0.1:")
    assert note.startswith("It asks for the cluster's Ray token: open it from JupyterLab's")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url + "/api/version", timeout=30)
    assert refused.value.code == 401
    env = dict(
        ln.removeprefix("export ").split("=", 1)
        for ln in run(shell, f"env {NAME}").splitlines()
        if ln.startswith("export ")
    )
    token = Path(env["RAY_AUTH_TOKEN_PATH"]).read_text()
    owner = {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(url + "/api/version", headers=owner)
    with urllib.request.urlopen(request, timeout=30) as resp:
        assert json.load(resp)["ray_version"].startswith("2.60")


def test_dashboard_on_jupyterhub_links_the_proxy(
    shell: InteractiveShell, up_output: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JUPYTERHUB_SERVICE_PREFIX", "/user/alice/")
    text = run(shell, f"dashboard {NAME}")
    assert text.strip() == f"Ray dashboard of {NAME}: /user/alice/raylab/clusters/{NAME}/dashboard/"


def test_logs_show_the_head_log(shell: InteractiveShell, up_output: str) -> None:
    text = run(shell, f"logs {NAME} --tail 400")
    assert "Ray runtime started" in text
    assert "Ray's own logs for this cluster" in text


def test_disconnect_then_connect(shell: InteractiveShell, up_output: str) -> None:
    import ray

    assert run(shell, "disconnect").strip() == f"Disconnected from {NAME}."
    assert not ray.is_initialized()
    assert run(shell, "disconnect").strip() == "Not connected to a cluster."
    assert f"Connected this kernel to {NAME}" in run(shell, f"connect {NAME}")
    assert ray.cluster_resources()["GPU"] == 2


def test_scale_down(shell: InteractiveShell, up_output: str) -> None:
    import ray

    text = run(shell, f"scale {NAME} --workers 1")
    assert text.startswith(f"Scaling {NAME} to 1 workers.")
    status = run(shell, f"status {NAME}")
    assert "Workers: 1/1 ready" in status
    assert "GPUs: 1 × a100" in status
    for _ in range(100):  # Ray notices the node is gone within seconds
        if ray.cluster_resources().get("GPU") == 1:
            break
        import time

        time.sleep(0.2)
    assert ray.cluster_resources()["GPU"] == 1


def test_down_removes_everything(shell: InteractiveShell, up_output: str, state_dir: Path) -> None:
    import ray

    from tests.conftest import processes_of_this_session

    assert run(shell, f"down {NAME}").strip() == f"Deleted {NAME}."
    assert not ray.is_initialized()
    assert not (state_dir / NAME).exists()
    assert "No clusters." in run(shell, "list")
    assert processes_of_this_session() == []
