"""raylab on a real JupyterHub, through the hub's login page, in real Chromium.

The hub (PyPI `jupyterhub`) behind its real proxy (npm `configurable-http-proxy`), with
the values of docs/zero-to-jupyterhub.md: users' servers on the KubeRay backend, one
namespace and one service account per user, the raylab culler as a hub service. Ray
pods run on the control plane's process nodes. Each test runs one test of
hub.journey.ts (what the users do in the browser) and checks Kubernetes around it, in
file order, as one afternoon on the hub would go.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from controlplane import ControlPlane, wait_until
from processnodes import PROCESS_GPU_TYPE, process_profile

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.config import Settings
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec

from ..kuberay_support import ROOT, ray_pods
from .deployment import ADMIN_PASSWORD, USER_PASSWORD, Hub

pytestmark = pytest.mark.ui

CLUSTER = "alice-exp"
# bob's cluster has the name of alice's: the admin's overview tells them apart by namespace.
BOB_CLUSTER = CLUSTER
CHROMIUM = os.environ.get("RAYLAB_CHROMIUM", "/usr/bin/chromium")
CONFIG = Path(__file__).with_name("playwright.config.ts")
RESTART_MARK = "READY-FOR-RESTART"


@pytest.fixture(scope="module")
def alice_clusters(control_plane: ControlPlane) -> Iterator[KubeRayBackend]:
    """alice's namespace as the cluster's admin sees it (kubectl), through raylab."""
    settings = Settings.from_config(
        backend="kuberay", gpu_types={PROCESS_GPU_TYPE: process_profile()}
    )
    with control_plane.api_client("admin") as api:
        yield KubeRayBackend(settings, api_client=api, namespace="ray-alice")


def journey(
    hub: Hub, title: str, *, env: dict[str, str] | None = None,
    during: Callable[[], None] | None = None,
) -> str:  # fmt: skip
    """Run the hub.journey.ts test named `title`; `during` runs when it prints the mark."""
    npx = shutil.which("npx")
    if not Path(CHROMIUM).exists() or npx is None:
        pytest.fail(f"{CHROMIUM} or npx is missing: `make sysdeps` and `npm ci` (make does both)")
    command = [npx, "playwright", "test", "--config", str(CONFIG), "--grep", title]
    full_env = {
        **os.environ, "RAYLAB_HUB_URL": hub.url, "RAYLAB_HUB_PASSWORD": USER_PASSWORD,
        "RAYLAB_HUB_CLUSTER": CLUSTER, "RAYLAB_CHROMIUM": CHROMIUM,
        "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1", "CI": "1", **(env or {}),
    }  # fmt: skip
    lines: list[str] = []
    with subprocess.Popen(
        command, cwd=ROOT, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True,
    ) as proc:  # fmt: skip
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.append(line)
                if during is not None and RESTART_MARK in line:
                    during()
        except BaseException:
            proc.kill()  # the browser would wait for what never comes
            raise
        code = proc.wait(timeout=900)
    output = "".join(lines)
    print(output)
    assert code == 0, (
        f"playwright exited with {code}:\n{output[-6000:]}\n--- hub log ---\n{hub.log_tail()}"
    )
    return output


def cluster(backend: KubeRayBackend) -> ClusterInfo:
    info = backend.get(CLUSTER)
    assert info is not None, f"{CLUSTER} is gone from ray-alice"
    return info


def test_alice_makes_a_cluster_from_the_sidebar_and_runs_a_gpu_task(
    hub: Hub, alice_clusters: KubeRayBackend
) -> None:
    journey(hub, "alice makes a cluster")
    info = cluster(alice_clusters)
    assert (info.owner, info.phase) == ("alice", Phase.READY)


def test_bob_beside_alice_can_neither_see_nor_reach_her_cluster(
    hub: Hub, alice_clusters: KubeRayBackend
) -> None:
    (head,) = [
        p for p in ray_pods(alice_clusters.api, "ray-alice", CLUSTER)
        if p["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]  # fmt: skip
    journey(hub, "bob, beside alice", env={"RAYLAB_HUB_HEAD_IP": head["status"]["podIP"]})


def test_the_admin_sees_every_users_clusters_with_their_owners(
    hub: Hub, alice_clusters: KubeRayBackend
) -> None:
    from kubernetes import config as k8s_config

    # bob makes a small cluster (a head alone) as his magics would: his own account, in
    # his own namespace, under the same name as alice's.
    with k8s_config.new_client_from_config(config_file=hub.kubeconfigs["raylab-bob"]) as api:
        bobs = KubeRayBackend(alice_clusters.settings, api_client=api, namespace="ray-bob")
        request = {"name": BOB_CLUSTER, "gpu_type": PROCESS_GPU_TYPE, "workers": 0,
                   "cpus": "500m", "memory": "1Gi"}  # fmt: skip
        bobs.create(ClusterSpec.from_mapping(request, alice_clusters.settings.profiles), "bob")
        try:
            journey(
                hub, "the admin sees every user",
                env={"RAYLAB_HUB_ADMIN_PASSWORD": ADMIN_PASSWORD,
                     "RAYLAB_HUB_BOB_CLUSTER": BOB_CLUSTER},
            )  # fmt: skip
            # The admin suspended it from the overview, by its namespaced path: bob's own
            # cluster in ray-bob, alice's untouched.
            his = bobs.get(BOB_CLUSTER)
            assert his is not None
            assert his.phase == Phase.SUSPENDED
            assert cluster(alice_clusters).phase == Phase.READY
        finally:
            bobs.delete(BOB_CLUSTER, propagation="Background")


def test_carol_is_told_which_permission_her_role_lacks(hub: Hub) -> None:
    journey(hub, "carol is told")


def test_alice_comes_back_after_the_hub_stopped_her_server(
    hub: Hub, alice_clusters: KubeRayBackend
) -> None:
    before = cluster(alice_clusters)
    # As jupyterhub-idle-culler does to an idle server: her kernel goes with it.
    hub.stop_server("alice")
    after = cluster(alice_clusters)
    assert (after.uid, after.phase) == (before.uid, Phase.READY)
    # Nobody's server watches it now; the hub's raylab-culler sees it idle and warns.
    warned = wait_until(
        "the hub's raylab-culler to warn that alice's cluster is idle",
        lambda: (i := cluster(alice_clusters)).idle.suspend_at is not None and i,
        timeout=120,
        interval=1,
    )
    assert warned.phase == Phase.READY
    journey(hub, "alice comes back")
    assert cluster(alice_clusters).idle.suspend_at is None  # she kept it running


def test_the_sidebars_live_through_a_hub_restart(hub: Hub, alice_clusters: KubeRayBackend) -> None:
    def restart_then_suspend() -> None:
        hub.stop_hub()
        # The proxy and alice's server carry on without it (the proxy's route to her
        # server answers; the hub's API does not).
        assert hub.status_of("/user/alice/api") == 200
        assert hub.status_of("/hub/api") >= 500
        hub.start_hub()
        alice_clusters.set_suspended(CLUSTER, True)

    journey(hub, "the sidebars live through a hub restart", during=restart_then_suspend)
    assert hub.server_of("alice") is not None, "the restarted hub lost alice's server"
    wait_until(
        "alice's pods to go",
        lambda: not ray_pods(alice_clusters.api, "ray-alice", CLUSTER),
        timeout=120,
    )
