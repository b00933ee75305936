"""`%raycluster ... --backend kuberay` in a real IPython shell, as alice with her kubeconfig.

alice's rights are the Role of docs/kubernetes-rbac.md; the namespace comes from her
kubeconfig context and enforces Pod Security "restricted". One cluster serves the module;
the tests run in file order, as a user's session would. `--no-connect` throughout: fake
KWOK pods run no Ray to connect to.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from controlplane import FAKE_NODES, ControlPlane, call_json, wait_until
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.magics import RayclusterMagics

from .kuberay_support import RAY, RESTRICTED, ROOT, grant, new_namespace, ray_pods, settings
from .kuberay_support import user_kubeconfig as kubeconfig_for

NAME = "m1"
K = "--backend kuberay"
A100_NODES = {n.name for n in FAKE_NODES if n.gpu_type == "a100"}


@dataclass
class Notebook:
    shell: InteractiveShell
    namespace: str
    kubeconfig: Path

    def run(self, line: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            self.shell.run_line_magic("raycluster", f"{line} {K}")
        return out.getvalue()

    def fails(self, line: str) -> tuple[str, str]:
        """(the UsageError's message, what was printed before it)."""
        out = io.StringIO()
        with contextlib.redirect_stdout(out), pytest.raises(UsageError) as err:
            self.shell.run_line_magic("raycluster", f"{line} {K}")
        return str(err.value), out.getvalue()


@pytest.fixture(scope="module")
def nb(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Notebook]:
    folder = tmp_path_factory.mktemp("kuberay-notebook")
    config_dir = folder / "jupyter"
    config_dir.mkdir()
    # What an admin puts in jupyter_server_config.py: room for the 64-GPU request.
    (config_dir / "jupyter_server_config.py").write_text(
        "c.Raylab.max_gpus_per_user = 256\nc.Raylab.wait_timeout = 60.0\n"
    )
    shell = InteractiveShell.instance()
    with (
        new_namespace(admin_api, "rl-nb", labels=RESTRICTED) as namespace,
        pytest.MonkeyPatch.context() as env,
    ):
        grant(admin_api, namespace, "alice")
        kubeconfig = kubeconfig_for(control_plane.kubeconfig("alice"), namespace, folder / "kc")
        env.setenv("KUBECONFIG", str(kubeconfig))
        env.setenv("JUPYTERHUB_USER", "alice")
        env.setenv("JUPYTER_CONFIG_DIR", str(config_dir))
        env.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        # A fresh magic reads the settings and the user from this environment.
        shell.register_magics(RayclusterMagics(shell))
        yield Notebook(shell, namespace, kubeconfig)
    # And a fresh one again for whoever uses the shell next, from their environment.
    shell.register_magics(RayclusterMagics(shell))


@pytest.fixture(scope="module")
def up_output(nb: Notebook) -> Iterator[str]:
    text = nb.run(f"up --name {NAME} --gpus 4 --gpu-type a100 --workers 2 --no-connect")
    yield text
    with contextlib.suppress(UsageError):
        nb.run(f"down {NAME}")


def cluster(admin_api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    custom = k8s_client.CustomObjectsApi(admin_api)
    obj: dict[str, Any] = call_json(
        custom.get_namespaced_custom_object, *RAY, namespace, "rayclusters", name
    )
    return obj


def by_type(pods: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"head": [], "worker": []}
    for pod in pods:
        out[pod["metadata"]["labels"]["ray.io/node-type"]].append(pod)
    return out


def test_up_gives_a_ready_cluster_on_a100_nodes(
    nb: Notebook, up_output: str, admin_api: k8s_client.ApiClient
) -> None:
    lines = up_output.splitlines()
    assert lines[0].startswith(f"{NAME}  ·  Pending"), up_output
    assert any(
        line.startswith(f"{NAME}  ·  Ready  ·  2/2 workers ready  ·  GPUs 4 × a100")
        for line in lines
    ), up_output
    assert f'ray.init("ray://{NAME}-head-svc.{nb.namespace}.svc:10001")' in up_output

    pods = by_type(ray_pods(admin_api, nb.namespace, NAME))
    assert len(pods["head"]) == 1
    assert len(pods["worker"]) == 2
    assert pods["head"][0]["spec"]["nodeName"] == "kwok-cpu-0"  # no GPU, no toleration
    for worker in pods["worker"]:
        assert worker["spec"]["nodeName"] in A100_NODES
        resources = worker["spec"]["containers"][0]["resources"]
        assert resources["requests"]["nvidia.com/gpu"] == "2"
        assert resources["limits"]["nvidia.com/gpu"] == "2"
        assert worker["metadata"]["labels"]["raylab.io/owner"] == "alice"

    status = cluster(admin_api, nb.namespace, NAME)["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions["HeadPodReady"] == "True"
    assert status["desiredGPU"] == "4"

    card = nb.run(f"status {NAME}")
    assert "Phase: Ready" in card
    assert "GPUs: 4 × a100" in card
    assert "Ray: 2.60.0 · Python 3.11" in card


def test_list_shows_the_cluster(nb: Notebook, up_output: str) -> None:
    header, row = nb.run("list").splitlines()[:2]
    assert header.split()[:3] == ["NAME", "PHASE", "WORKERS"]
    assert row.split()[:3] == [NAME, "Ready", "2/2"]
    assert "4 × a100" in row


def test_more_gpus_than_nodes_stays_pending_with_the_schedulers_reason(
    nb: Notebook, control_plane: ControlPlane
) -> None:
    # 8 workers of 8 H100s; the one H100 node has 4: nothing can be placed.
    message, printed = nb.fails("up --name big --gpus 64 --gpu-type h100 --workers 8 "
                                "--no-connect --timeout 8")  # fmt: skip
    assert message.startswith("cluster 'big' is still Pending after 8 s"), message
    assert "it was kept" in message
    assert any(ln.startswith("big  ·  Pending") for ln in printed.splitlines()), printed
    # The scheduler's reason, once it has tried all eight pods (a busy machine can take
    # longer than `up`'s 8 s): order and content here, timing in bench/.
    nodes = len(FAKE_NODES) + len(control_plane.process_nodes)
    reason = f"8 of 8 workers cannot be scheduled: 0/{nodes} nodes are available"

    def with_reason() -> str | None:
        shown = nb.run("status big")
        return shown if reason in shown else None

    card = wait_until("the scheduler's reason", with_reason, timeout=120, interval=1.0)
    assert "Insufficient nvidia.com/gpu" in card
    assert f"Phase: Pending — {reason}" in card
    assert nb.run("down big").strip() == "Deleted big."


def test_scale(nb: Notebook, up_output: str) -> None:
    assert nb.run(f"scale {NAME} --workers 3").startswith(f"Scaling {NAME} to 3 workers.")
    wait_until(
        "3 workers ready",
        lambda: "Workers: 3/3 ready" in nb.run(f"status {NAME}"),
        timeout=60,
        interval=0.5,
    )
    assert "GPUs: 6 × a100" in nb.run(f"status {NAME}")


def test_suspend_and_resume(nb: Notebook, up_output: str, admin_api: k8s_client.ApiClient) -> None:
    text = nb.run(f"suspend {NAME}")
    assert text.strip() == f"Suspended {NAME}; `%raycluster resume {NAME}` restarts it."
    wait_until("pods gone", lambda: not ray_pods(admin_api, nb.namespace, NAME), 60, 0.5)
    wait_until(
        "Suspended",
        lambda: "Phase: Suspended — suspended: no pods running" in nb.run(f"status {NAME}"),
        timeout=30,
        interval=0.5,
    )
    assert nb.run(f"resume {NAME}").startswith(f"Resuming {NAME}.")
    wait_until(
        "Ready again",
        lambda: "Phase: Ready" in (card := nb.run(f"status {NAME}")) and "3/3" in card,
        timeout=60,
        interval=0.5,
    )


def test_logs_say_why_there_are_none(nb: Notebook, up_output: str) -> None:
    message, _ = nb.fails(f"logs {NAME}")
    assert message.startswith(f"cannot read the log of head pod {NAME}-head-"), message


def test_alice_cannot_see_or_touch_bobs_cluster(
    nb: Notebook, up_output: str, admin_api: k8s_client.ApiClient, bob_api: k8s_client.ApiClient
) -> None:
    grant(admin_api, nb.namespace, "bob")
    bob = KubeRayBackend(settings(), api_client=bob_api, namespace=nb.namespace)
    from raylab.service import ClusterService

    ClusterService(bob, settings(), "bob").create({"name": "bobs", "workers": 0})
    try:
        assert "bobs" not in nb.run("list")
        for verb in ("status", "down", "logs", "suspend"):
            message, _ = nb.fails(f"{verb} bobs")
            assert message == "no cluster named 'bobs'\n`%raycluster list` shows your clusters"
        message, _ = nb.fails("up --name bobs --no-connect")
        assert message.startswith("the name 'bobs' is taken by another user's cluster")
        assert cluster(admin_api, nb.namespace, "bobs")["metadata"]["annotations"][
            "raylab.io/owner"] == "bob"  # fmt: skip
    finally:
        bob.delete("bobs", propagation="Background")


def test_down_removes_pods_and_service(
    nb: Notebook, up_output: str, admin_api: k8s_client.ApiClient
) -> None:
    assert nb.run(f"down {NAME}").strip() == f"Deleted {NAME}."
    core = k8s_client.CoreV1Api(admin_api)

    def gone() -> bool:
        services = call_json(core.list_namespaced_service, nb.namespace)["items"]
        return not ray_pods(admin_api, nb.namespace, NAME) and not any(
            s["metadata"]["name"].startswith(f"{NAME}-") for s in services
        )

    wait_until("pods and head service garbage-collected", gone, timeout=90, interval=0.5)
    wait_until("listed no more", lambda: "No clusters." in nb.run("list"), 30, 0.5)


def test_the_cli_works_unchanged(nb: Notebook) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "raylab.cli", *args, "--backend", "kuberay"],
            capture_output=True, text=True, env=env, timeout=120, check=False,
        )  # fmt: skip

    up = cli("up", "--name", "c1", "--workers", "1", "--gpu-type", "cpu", "--timeout", "60")
    assert up.returncode == 0, up.stderr
    assert "c1  ·  Ready  ·  1/1 workers ready  ·  GPUs none" in up.stdout
    listed = cli("list")
    assert listed.stdout.splitlines()[1].split()[:3] == ["c1", "Ready", "1/1"]
    down = cli("down", "c1")
    assert down.stdout.strip() == "Deleted c1."
