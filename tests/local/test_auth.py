"""Per-cluster Ray tokens on the local backend, with real Ray processes.

Three head-only clusters serve the module: two with tokens of their own and one made with
token auth off, all started with a Ray token in the user's home (~/.ray/auth_token).
Strangers are played by fresh Python processes that try Ray Client, the GCS and the
dashboard's HTTP API without the token, or with a wrong one.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from raylab import auth
from raylab.backends.local.backend import LocalBackend
from raylab.commands import Commands
from raylab.config import Settings
from raylab.kernel.connect import connected_cluster
from raylab.magics import NotebookOutput
from raylab.model import ClusterInfo, Phase
from raylab.service import ClusterService

FIRST, SECOND, OPEN = "auth1", "auth2", "auth0"
OWNER = os.environ.get("JUPYTERHUB_USER") or __import__("getpass").getuser()


def run(shell: InteractiveShell, line: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        shell.run_line_magic("raycluster", line)
    return out.getvalue()


def service(*, token_auth: bool = True, user: str = OWNER) -> ClusterService:
    settings = Settings.from_config(ray_auth="token" if token_auth else "disabled")
    backend = LocalBackend(settings.local_state_dir(), token_auth=token_auth)
    return ClusterService(backend, settings, user)


@pytest.fixture(scope="module")
def clusters(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ClusterInfo]]:
    # A Ray user's home: any plain `ray.init()` of Ray 2.60 leaves a token there, which
    # a node started with no auth mode said takes up by itself.
    home = tmp_path_factory.mktemp("home")
    (home / ".ray").mkdir()
    auth.write_token_file(home / ".ray" / "auth_token", auth.new_token())
    made: dict[str, ClusterInfo] = {}
    try:
        for name, token_auth in ((FIRST, True), (SECOND, True), (OPEN, False)):
            with mock.patch.dict(os.environ, {"HOME": str(home)}):
                service(token_auth=token_auth).create({"name": name, "workers": 0, "cpus": "1"})
        for name in (FIRST, SECOND, OPEN):
            made[name] = service().wait(name, lambda i: i.phase == Phase.READY, timeout=600)
        yield made
    finally:
        for name in (FIRST, SECOND, OPEN):
            with contextlib.suppress(Exception):
                service().delete(name)


def token_file(state_dir: Path, name: str) -> Path:
    return state_dir / name / auth.TOKEN_FILE


def stranger(code: str, **env: str) -> str:
    """Run `code` in a fresh Python process with Ray's auth settings from `env` only."""
    clean = {k: v for k, v in os.environ.items() if k not in auth.AUTH_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    return proc.stdout + proc.stderr


def http_status(url: str, headers: dict[str, str]) -> int:
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as err:
        return err.code


def test_each_cluster_has_its_own_private_token(
    clusters: dict[str, ClusterInfo], state_dir: Path
) -> None:
    first, second = (token_file(state_dir, n) for n in (FIRST, SECOND))
    assert stat.S_IMODE(first.stat().st_mode) == 0o600
    assert stat.S_IMODE(second.stat().st_mode) == 0o600
    assert len(first.read_text()) == 64
    assert first.read_text() != second.read_text()
    assert not token_file(state_dir, OPEN).exists()
    # Every Ray process of the cluster runs with the token (and nothing else on it).
    from tests.conftest import processes_of_this_session

    envs = [p.environ() for p in processes_of_this_session()]
    ours = [e for e in envs if e.get("RAYLAB_CLUSTER") == FIRST]
    assert len(ours) >= 5  # supervisor, ray start, GCS, raylet, dashboard, ...
    for env in ours:
        assert env["RAY_AUTH_MODE"] == "token"
        assert env["RAY_AUTH_TOKEN_PATH"] == str(first)
        assert "RAY_AUTH_TOKEN" not in env


def test_dashboard_refuses_requests_without_the_right_token(
    clusters: dict[str, ClusterInfo], state_dir: Path
) -> None:
    api = f"{clusters[FIRST].endpoints.dashboard}/api/version"
    token = token_file(state_dir, FIRST).read_text()
    assert http_status(api, {}) == 401
    assert http_status(api, {"Authorization": "Bearer wrong"}) == 403
    other = token_file(state_dir, SECOND).read_text()
    assert http_status(api, {"Authorization": auth.bearer(other)}) == 403
    assert http_status(api, {"Authorization": auth.bearer(token)}) == 200
    # The cluster made with auth off answers anyone, as before.
    assert http_status(f"{clusters[OPEN].endpoints.dashboard}/api/version", {}) == 200


GCS_PROBE = """
    from ray._raylet import GcsClient
    try:
        GcsClient(address="{address}").internal_kv_keys(b"", namespace=None, timeout=20)
        print("ANSWERED")
    except Exception as exc:
        print("REFUSED", type(exc).__name__, exc)
"""


def test_gcs_refuses_a_process_without_the_token(
    clusters: dict[str, ClusterInfo], state_dir: Path
) -> None:
    state = json.loads((state_dir / FIRST / "cluster.json").read_text())
    probe = GCS_PROBE.format(address=f"127.0.0.1:{state['ports']['gcs']}")
    assert "REFUSED AuthenticationError" in stranger(probe, RAY_AUTH_MODE="disabled")
    wrong = stranger(probe, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="wrong")
    assert "REFUSED AuthenticationError" in wrong
    assert "ANSWERED" in stranger(
        probe, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file(state_dir, FIRST))
    )


CLIENT_PROBE = """
    import ray.util.client
    try:
        ray.util.client.ray.connect("{address}", connection_retries=1)
        print("CONNECTED")
    except ConnectionError as exc:
        print("REFUSED", exc)
"""


def test_ray_client_refuses_a_process_without_the_token(
    clusters: dict[str, ClusterInfo],
) -> None:
    probe = CLIENT_PROBE.format(address=clusters[FIRST].endpoints.client.removeprefix("ray://"))
    assert "REFUSED" in stranger(probe, RAY_AUTH_MODE="disabled")
    assert "REFUSED" in stranger(probe, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="wrong")


def test_the_owners_kernel_moves_between_clusters_with_different_tokens(
    clusters: dict[str, ClusterInfo], shell: InteractiveShell, state_dir: Path
) -> None:
    import ray

    tokens = {token_file(state_dir, n).read_text() for n in (FIRST, SECOND)}
    outputs = []
    for name in (FIRST, SECOND, OPEN, FIRST):
        outputs.append(run(shell, f"connect {name}"))
        assert connected_cluster() == name
        assert ray.get(ray.put(name)) == name  # the cluster really answers
        # The kernel holds a private copy of the token, named, never the token itself.
        assert "RAY_AUTH_TOKEN" not in os.environ
        path = os.environ.get("RAY_AUTH_TOKEN_PATH")
        if name == OPEN:
            assert path is None
        else:
            assert path is not None
            assert stat.S_IMODE(Path(path).stat().st_mode) == 0o600
    outputs.append(run(shell, "disconnect"))
    assert "RAY_AUTH_TOKEN_PATH" not in os.environ
    outputs += [run(shell, "list"), run(shell, f"status {FIRST}"), run(shell, f"logs {FIRST}")]
    for text in outputs:
        assert not any(t in text for t in tokens)


def test_env_gives_ray_tools_what_they_need(
    clusters: dict[str, ClusterInfo], shell: InteractiveShell, state_dir: Path
) -> None:
    text = run(shell, f"env {FIRST}")
    assert token_file(state_dir, FIRST).read_text() not in text
    lines = dict(ln.removeprefix("export ").split("=", 1) for ln in text.splitlines() if "=" in ln)
    assert lines["RAY_ADDRESS"] == clusters[FIRST].endpoints.dashboard
    assert lines["RAY_AUTH_MODE"] == "token"
    assert stat.S_IMODE(Path(lines["RAY_AUTH_TOKEN_PATH"]).stat().st_mode) == 0o600
    # What `ray job submit` would do, from a shell with those lines.
    jobs = """
        from ray.job_submission import JobSubmissionClient
        print("JOBS", JobSubmissionClient().list_jobs())
    """
    assert "JOBS [JobDetails(type=<JobType.DRIVER" in stranger(jobs, **lines)  # our kernel's
    refused = stranger(jobs, RAY_ADDRESS=lines["RAY_ADDRESS"])
    assert "JOBS" not in refused
    assert "Authentication required" in refused


def test_only_the_owner_gets_the_token(clusters: dict[str, ClusterInfo]) -> None:
    bob = Commands(NotebookOutput(), prog="%raycluster", may_connect=True, user="bob")
    with pytest.raises(Exception, match=f"no cluster named '{FIRST}'"):
        bob.run_line(f"env {FIRST}")
    settings = Settings.from_config(admin_users=["root-admin"])
    admin = Commands(NotebookOutput(), prog="%raycluster", may_connect=True,
                     settings=settings, user="root-admin")  # fmt: skip
    with pytest.raises(Exception, match=f"only {OWNER}, who owns '{FIRST}', can connect"):
        admin.run_line(f"connect {FIRST}")
    assert connected_cluster() is None


def test_a_missing_or_open_token_file_is_named(
    clusters: dict[str, ClusterInfo], shell: InteractiveShell, state_dir: Path
) -> None:
    path = token_file(state_dir, SECOND)
    kept = path.with_name("kept")
    path.rename(kept)
    try:
        with pytest.raises(UsageError) as err:
            run(shell, f"connect {SECOND}")
        assert f"{path} does not exist" in str(err.value)
        assert f"`%raycluster suspend {SECOND}` then `%raycluster resume {SECOND}`" in str(
            err.value
        )
        assert connected_cluster() is None
    finally:
        kept.rename(path)
    path.chmod(0o644)
    try:
        with pytest.raises(UsageError, match=r"open to other users \(mode 0644\)"):
            run(shell, f"connect {SECOND}")
        assert connected_cluster() is None
    finally:
        path.chmod(0o600)
    assert service().get(SECOND).phase == Phase.READY  # nothing changed


def test_resume_gives_a_cluster_that_lost_its_token_a_new_one(
    clusters: dict[str, ClusterInfo], shell: InteractiveShell, state_dir: Path
) -> None:
    import ray

    path = token_file(state_dir, SECOND)
    old = path.read_text()
    svc = service()
    svc.set_suspended(SECOND, True)
    path.unlink()
    svc.set_suspended(SECOND, False)
    svc.wait(SECOND, lambda i: i.phase == Phase.READY, timeout=600)
    assert path.read_text() != old
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    run(shell, f"connect {SECOND}")
    assert ray.get(ray.put(1)) == 1
    run(shell, "disconnect")
