"""`raylab culler` as its own process against the real control plane, with no Jupyter
server for the user: it reads what alice's clusters do, keeps the idle state in their
annotations, suspends them and records GPU-hours in her ConfigMap.

KWOK pods run no Ray, so a cluster's own dashboard cannot be read here: the first test
shows that such a cluster is never suspended. The second points the cullers at a real
Ray dashboard (a local cluster with token auth off, through c.Raylab.culler_dashboard_url)
so that they see a real idle cluster, and runs two of them at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import IDLE_ANNOTATION, idle_from_annotation
from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.culler.activity import Activity, ActivityReader
from raylab.culler.ledger_store import DATA_KEY, store_for
from raylab.display import render
from raylab.errors import Forbidden
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.service import ClusterService

from .kuberay_support import (
    ROOT,
    documented_rbac,
    grant,
    new_namespace,
    settings,
    wait_info,
    without_rule,
)

OWNER = "alice"
GPU = {"gpus": 1, "gpu_type": "a100", "workers": 1, "cpus": "1", "memory": "1Gi"}


@pytest.fixture(scope="module")
def namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    with new_namespace(admin_api, "rl-cull") as name:
        grant(admin_api, name, OWNER)
        yield name


@pytest.fixture(scope="module")
def alice(alice_api: k8s_client.ApiClient, namespace: str) -> ClusterService:
    s = settings()
    return ClusterService(KubeRayBackend(s, api_client=alice_api, namespace=namespace), s, OWNER)


@pytest.fixture(scope="module")
def real_dashboard() -> Iterator[str]:
    """A real, idle Ray head (token auth off, so any token passes) whose dashboard the
    cullers read for every cluster in the second test."""
    s = Settings.from_config(ray_auth="disabled")
    local = ClusterService(LocalBackend(s.local_state_dir(), token_auth=False), s, OWNER)
    try:
        local.create({"name": "cull-ray", "workers": 0, "cpus": "1"})
        info = local.wait("cull-ray", lambda i: i.phase == Phase.READY, timeout=600)
        assert info.endpoints.dashboard
        yield info.endpoints.dashboard
    finally:
        if local.backend.get("cull-ray") is not None:
            local.delete("cull-ray")


class CullerProcess:
    """`raylab culler` in a process of its own, with its own credentials and config."""

    def __init__(self, work: Path, kubeconfig: Path, scope: list[str], config: dict[str, Any]):
        work.mkdir(parents=True, exist_ok=True)
        (work / "config").mkdir(exist_ok=True)
        lines = [f"c.Raylab.{k} = {v!r}" for k, v in config.items()]
        (work / "config" / "jupyter_server_config.py").write_text("\n".join(lines) + "\n")
        env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "RAYLAB_BACKEND": "kuberay",
            "JUPYTER_CONFIG_DIR": str(work / "config"),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log_path = work / "culler.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "raylab.cli", "culler", "--interval", "0.5", *scope],
            env=env, stdout=self.log, stderr=subprocess.STDOUT,
        )  # fmt: skip

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def sweeps(self) -> int:
        return self.text().count("sweep: ")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@contextlib.contextmanager
def cullers(count: int, tmp_path: Path, kubeconfig: Path, namespace: str | None,
            config: dict[str, Any]) -> Iterator[list[CullerProcess]]:  # fmt: skip
    """`count` cullers of `namespace`, or (None) of every namespace."""
    scope = ["--namespace", namespace] if namespace else ["--all-namespaces"]
    procs = [CullerProcess(tmp_path / f"culler{i}", kubeconfig, scope, config)
             for i in range(count)]  # fmt: skip
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()


def idle_of(admin_api: k8s_client.ApiClient, namespace: str, name: str) -> IdleState:
    custom = k8s_client.CustomObjectsApi(admin_api)
    obj = call_json(custom.get_namespaced_custom_object, "ray.io", "v1", namespace,
                    "rayclusters", name)  # fmt: skip
    return idle_from_annotation(obj["metadata"]["annotations"].get(IDLE_ANNOTATION))


def ledger(admin_api: k8s_client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    core = k8s_client.CoreV1Api(admin_api)
    cm = call_json(core.read_namespaced_config_map, f"raylab-usage-{OWNER}", namespace)
    return [json.loads(line) for line in cm["data"][DATA_KEY].splitlines()]


def more_sweeps(procs: list[CullerProcess], count: int) -> None:
    start = [p.sweeps() for p in procs]
    wait_until(
        f"{count} more sweeps",
        lambda: (
            all(p.sweeps() >= s + count for p, s in zip(procs, start, strict=True)) or _died(procs)
        ),
        timeout=120,
    )


def _died(procs: list[CullerProcess]) -> bool:
    for p in procs:
        if p.proc.poll() is not None:
            raise AssertionError(f"the culler exited with {p.proc.returncode}:\n{p.text()}")
    return False


def ready(alice: ClusterService, name: str) -> ClusterInfo:
    alice.create({"name": name, **GPU})
    return wait_info(alice.backend, name, lambda i: i.phase == Phase.READY, "Ready")


def suspending(dashboard: str) -> dict[str, Any]:
    """Settings that warn and suspend an idle a100 cluster within seconds, reading every
    cluster's activity from `dashboard`, and flush GPU-hours every second."""
    return {
        "idle_suspend_minutes": {"a100": 0.05},  # 3 s
        "idle_warning_minutes": 0.02,
        "usage_flush_seconds": 1.0,
        "culler_dashboard_url": dashboard,
    }


def test_a_cluster_whose_activity_cannot_be_read_is_never_suspended(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    alice: ClusterService,
    namespace: str,
    tmp_path: Path,
) -> None:
    info = ready(alice, "unreadable")
    config = {
        "idle_suspend_minutes": {"a100": 0.01},  # 0.6 s: it would be long gone if idle
        "idle_warning_minutes": 0.0,
        "activity_unknown_grace_minutes": 0.01,
        "usage_flush_seconds": 1.0,
    }
    kubeconfig = control_plane.kubeconfig("admin")
    with cullers(1, tmp_path, kubeconfig, namespace, config) as procs:
        wait_until(
            "the culler says its activity is unknown",
            lambda: (
                idle_of(admin_api, namespace, "unreadable").unknown_since is not None
                or _died(procs)
            ),
            timeout=120,
        )
        more_sweeps(procs, 10)  # 5 s: many times the limit and the grace
        idle = idle_of(admin_api, namespace, "unreadable")
        assert "unknown" in procs[0].text()
    now = alice.get("unreadable")
    assert now.phase == Phase.READY
    assert (idle.since, idle.suspend_at, idle.suspended_at) == (None, None, None)
    assert "dashboard" in idle.unknown_reason
    assert render.idle_text(now).startswith("activity unknown since ")
    # Running with its GPU: metered in alice's ledger, under the cluster's uid.
    rows = [r for r in ledger(admin_api, namespace) if r["uid"] == info.uid]
    assert rows
    assert {(r["cluster"], r["owner"], r["gpu_type"], r["gpus"]) for r in rows} == {
        ("unreadable", OWNER, "a100", 1)
    }
    assert sum(r["end"] - r["start"] for r in rows) > 0
    alice.delete("unreadable")


def test_two_cullers_suspend_an_idle_cluster_once_and_keep_why(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    alice: ClusterService,
    namespace: str,
    real_dashboard: str,
    tmp_path: Path,
) -> None:
    info = ready(alice, "idle-gpu")
    config = suspending(real_dashboard)
    kubeconfig = control_plane.kubeconfig("admin")
    with cullers(2, tmp_path, kubeconfig, namespace, config) as procs:
        wait_until(
            "it is warned",
            lambda: (
                idle_of(admin_api, namespace, "idle-gpu").suspend_at is not None or _died(procs)
            ),
            timeout=120,
        )
        suspended = wait_info(
            alice.backend, "idle-gpu", lambda i: i.phase == Phase.SUSPENDED, "Suspended", 120
        )
        more_sweeps(procs, 4)
    logs = [p.text() for p in procs]
    assert sum(log.count("suspended idle-gpu") for log in logs) == 1, logs
    assert all(log.count("warned idle-gpu") <= 1 for log in logs)
    idle = suspended.idle
    assert idle.since is not None
    assert idle.suspended_at is not None
    assert idle.suspend_at is None
    assert render.phase_text(suspended).startswith("Suspended — suspended after ")
    assert " idle at " in render.phase_text(suspended)
    # Billed until it was suspended, and not after.
    rows = [r for r in ledger(admin_api, namespace) if r["uid"] == info.uid]
    assert rows
    assert max(r["end"] for r in rows) <= idle.suspended_at + 1.5
    # Resume (alice's own) brings it back without the reason; nothing was deleted.
    resumed = alice.set_suspended("idle-gpu", False)
    assert resumed.idle == IdleState()
    assert idle_of(admin_api, namespace, "idle-gpu") == IdleState()
    alice.delete("idle-gpu")


def test_one_culler_of_every_namespace_keeps_each_clusters_things_in_its_own(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    alice_api: k8s_client.ApiClient,
    alice: ClusterService,
    namespace: str,
    real_dashboard: str,
    tmp_path: Path,
) -> None:
    """`raylab culler --all-namespaces`, as the chart runs it by default: an idle cluster
    in a namespace made after it started (as onboarding makes each user's) is suspended
    as one in a namespace that was there, and each cluster's GPU-hours go to its owner's
    ledger in the cluster's own namespace, where `%raycluster usage` reads them. Both
    clusters have one name, as each user's first cluster may."""
    first = ready(alice, "every")
    config = suspending(real_dashboard)
    kubeconfig = control_plane.kubeconfig("admin")
    with cullers(1, tmp_path, kubeconfig, None, config) as procs:
        more_sweeps(procs, 1)
        with new_namespace(admin_api, "rl-cull-late") as late:
            grant(admin_api, late, OWNER)
            s = settings()
            other = ClusterService(KubeRayBackend(s, api_client=alice_api, namespace=late),
                                   s, OWNER)  # fmt: skip
            second = ready(other, "every")
            for service in (alice, other):
                wait_info(service.backend, "every", lambda i: i.phase == Phase.SUSPENDED,
                          "Suspended", 120)  # fmt: skip
            more_sweeps(procs, 3)  # its GPU-hours flushed (every 1 s)
            assert [r for r in ledger(admin_api, late) if r["uid"] == second.uid]
            other.delete("every")
        assert "watching every namespace" in procs[0].text()
    mine = {r["uid"] for r in ledger(admin_api, namespace)}
    assert first.uid in mine
    assert second.uid not in mine  # not in the first namespace's ledger
    alice.delete("every")


def test_conditional_updates_let_one_writer_win(
    alice: ClusterService, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    ready(alice, "race")
    backend = alice.backend
    t = time.time()
    warned = IdleState(since=t - 100, suspend_at=t - 1)
    assert backend.update_idle("race", warned)
    done = IdleState(since=t - 100, suspended_at=t)
    results = [backend.update_idle("race", done, expected=warned, suspend=True) for _ in "ab"]
    assert results == [True, False]
    assert idle_of(admin_api, namespace, "race") == IdleState(since=int(t - 100),
                                                              suspended_at=int(t))  # fmt: skip
    assert alice.get("race").phase == Phase.SUSPENDED
    # Keep running (unconditional) after a stale culler read: the culler's write loses.
    alice.set_suspended("race", False)
    wait_info(alice.backend, "race", lambda i: i.phase == Phase.READY, "Ready again")
    assert backend.update_idle("race", warned)
    alice_view = alice.get("race").idle
    kept = alice.keep_running("race")
    assert kept.idle == IdleState()
    assert not backend.update_idle("race", done, expected=alice_view, suspend=True)
    assert alice.get("race").phase != Phase.SUSPENDED
    alice.delete("race")


# --- the culler's rights, rule by rule ------------------------------------------------

CULLER_DOC = ROOT / "docs" / "culler.md"
Step = Callable[[KubeRayBackend, ClusterInfo], object]


def _read_activity(backend: KubeRayBackend, info: ClusterInfo) -> Activity:
    return ActivityReader(
        backend, address_template=backend.settings.options.culler_dashboard_url
    ).read(info)


def _record_hours(backend: KubeRayBackend, info: ClusterInfo) -> None:
    store_for(backend).save(OWNER, [], keep_after=0.0)


# Each rule of docs/culler.md's Role: the culler's step that needs it and the verb it is
# refused first. rayclusters' patch and delete (suspending, retiring a standby) go with
# its list: without the rule nothing is followed at all.
CULLER_STEPS: dict[str, tuple[str, Step, str]] = {
    "rayclusters": ("following the clusters", lambda b, i: b.clusters(), "list"),
    "pods": ("following the clusters (their pods)", lambda b, i: b.clusters(), "list"),
    "secrets": ("reading a cluster's activity (its Ray token)", _read_activity, "get"),
    "configmaps": ("recording GPU-hours (the ledger)", _record_hours, "get"),
}
# Rules no step here fails without, and why they stay.
CULLER_OTHERS = {
    "events": "optional: the operator's warnings on a refused cluster (its status)",
    "workloads": "Kueue only: a queued cluster is suspended through its Workload "
    "(test_kueue.py's culler test)",
    "localqueues": "Kueue only: a cluster's ClusterQueue, read once (without it the queue "
    "shows less)",
}


def _refusal(step: Step, backend: KubeRayBackend, info: ClusterInfo) -> str | None:
    """What refused the step (its one line), or None when it worked."""
    try:
        out = step(backend, info)
    except Forbidden as exc:
        return str(exc)
    if isinstance(out, Activity) and out.state == "unknown":
        return out.why
    return None


def test_every_culler_rule_is_accounted_for() -> None:
    rules = [r["resources"][0] for r in documented_rbac(CULLER_DOC)["Role"]["rules"]]
    assert sorted(rules) == sorted([*CULLER_STEPS, *CULLER_OTHERS])


def test_without_each_culler_rule_its_step_fails_naming_it(
    admin_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
    alice: ClusterService,
    namespace: str,
    real_dashboard: str,
) -> None:
    """bob runs the culler's steps with docs/culler.md's Role in alice's namespace (as
    the chart's culler with culler.rbacScope=namespaces), without each rule in turn."""
    info = ready(alice, "rules")
    s = settings(culler_dashboard_url=real_dashboard)
    backend = KubeRayBackend(s, api_client=bob_api, namespace=namespace)
    grant(admin_api, namespace, "bob", page=CULLER_DOC)
    try:
        for resource, (step, run, verb) in CULLER_STEPS.items():
            with without_rule(admin_api, "bob", resource, namespace=namespace, page=CULLER_DOC):
                refused = _refusal(run, backend, info)
            assert refused is not None, step
            assert f"Kubernetes does not allow you to {verb} {resource}" in refused, (step, refused)
            assert _refusal(run, backend, info) is None, step  # the rule back, it works
    finally:
        k8s_client.RbacAuthorizationV1Api(admin_api).delete_namespaced_role_binding(
            "raylab-bob", namespace
        )
        alice.delete("rules")
