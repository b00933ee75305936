"""Shared GPUs through the real Kueue controller: raylab's clusters wait their turn in a
LocalQueue, show their place, and Kueue, not raylab, holds the quota.

The admin's objects are docs/kueue.md's, applied as written: ClusterQueue `gpus` with 16
A100 GPUs (the two KWOK A100 nodes, so pods cost nothing), LocalQueue `team` in each
user's namespace, priority classes `normal` and `high`. alice and bob work through
`ClusterService` with the documented Role and queue-viewer ClusterRole; carol's backend
holds admin credentials (as an admin's server does).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.backends.kuberay.manifest import raycluster_manifest
from raylab.culler.ledger import Meter
from raylab.culler.ledger_store import LocalLedger
from raylab.culler.sweep import Culler
from raylab.errors import BackendUnavailable, Forbidden, SpecError, WaitTimeout
from raylab.model import ClusterInfo, IdleState, Phase
from raylab.profiles import Profiles
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

from .kuberay_support import (
    RAY,
    ROOT,
    Recorder,
    grant,
    new_namespace,
    settings,
    user_allowed,
    user_kubeconfig,
    without_rule,
)
from .kueue_support import (  # noqa: F401  (kueue: a fixture)
    CLUSTER_QUEUE,
    KUEUE,
    apply_documented,
    bind_queue_viewer,
    condition,
    delete_documented,
    kueue,
    unbind_queue_viewer,
    workload_for,
)
from .server_process import NO_QUOTAS, raylab_server

SETTINGS = settings(local_queue="team", priority_classes=["normal", "high"])
# Small pods: the KWOK nodes hold them all; only GPUs are scarce.
SMALL = {"gpu_type": "a100", "cpus": "1", "memory": "1Gi"}


def test_no_kueue_for_the_queue_named_gives_one_line_and_creates_nothing(
    admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient
) -> None:
    """First in the module, before its fixture starts Kueue: on a fresh control plane
    there is no Kueue API at all; after another module ran Kueue its CRDs stay, and the
    LocalQueue is what is missing. Either is one line naming it."""
    with new_namespace(admin_api, "kq-none") as ns:
        grant(admin_api, ns, "alice")
        alice = _service(alice_api, ns, "alice")
        with pytest.raises(BackendUnavailable) as caught:
            alice.create({"name": "q1", "gpus": 8, "workers": 1, **SMALL})
        message = caught.value.message
        assert ("Kueue is not installed" in message and "local_queue asks for it" in message) or (
            f"Kueue has no LocalQueue 'team' in namespace '{ns}'" in message
        ), message
        assert "\n" not in message
        assert alice.list() == []
        # Nothing of it was made: no Secret, no NetworkPolicy.
        secrets = call_json(k8s_client.CoreV1Api(admin_api).list_namespaced_secret, ns)["items"]
        assert [s["metadata"]["name"] for s in secrets if "q1" in s["metadata"]["name"]] == []


@dataclass
class Team:
    alice: ClusterService
    bob: ClusterService
    carol: ClusterService
    namespaces: dict[str, str]


def _service(api: k8s_client.ApiClient, namespace: str, user: str) -> ClusterService:
    return ClusterService(KubeRayBackend(SETTINGS, api_client=api, namespace=namespace),
                          SETTINGS, user)  # fmt: skip


@pytest.fixture(scope="module")
def team(
    kueue: ControlPlane,  # noqa: F811 (the fixture)
    admin_api: k8s_client.ApiClient,
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
) -> Iterator[Team]:
    bind_queue_viewer(admin_api, ["alice", "bob"])
    with (
        new_namespace(admin_api, "kq-alice") as ns_a,
        new_namespace(admin_api, "kq-bob") as ns_b,
        new_namespace(admin_api, "kq-carol") as ns_c,
    ):
        apply_documented(admin_api, [ns_a, ns_b, ns_c])
        grant(admin_api, ns_a, "alice")
        grant(admin_api, ns_b, "bob")
        try:
            yield Team(
                alice=_service(alice_api, ns_a, "alice"),
                bob=_service(bob_api, ns_b, "bob"),
                carol=_service(admin_api, ns_c, "carol"),
                namespaces={"alice": ns_a, "bob": ns_b, "carol": ns_c},
            )
        finally:
            # Their clusters first (Kueue frees their quota), then the queue itself.
            custom = k8s_client.CustomObjectsApi(admin_api)
            for ns in (ns_a, ns_b, ns_c):
                custom.delete_collection_namespaced_custom_object(*RAY, ns, "rayclusters")
    delete_documented(admin_api)
    unbind_queue_viewer(admin_api)


def saw(watch: Recorder, name: str, phase: Phase, text: str = "", timeout: float = 60) -> None:
    """The watch yielded `name` in `phase` with `text` in its reason (as it was added or
    as it changed: which comes first depends on when the watch saw its Workload)."""

    def seen() -> bool:
        if watch.error is not None:
            raise watch.error
        return watch.seen(name, "ADDED", phase, text) or watch.seen(name, "MODIFIED", phase, text)

    try:
        wait_until(f"watch: {name} {phase} {text}", seen, timeout, 0.1)
    except TimeoutError:
        shown = [f"{e.type} {e.cluster.phase} — {e.cluster.reason}" for e in watch.events
                 if e.cluster.name == name]  # fmt: skip
        raise AssertionError(
            f"{name} never {phase} with {text!r}; the watch said: {shown}"
        ) from None


def until(
    service: ClusterService, name: str, test: Any, what: str, timeout: float = 60
) -> ClusterInfo:
    last: list[ClusterInfo] = []

    def probe() -> ClusterInfo | None:
        info = service.get(name)
        last[:] = [info]
        return info if test(info) else None

    try:
        return wait_until(f"{name}: {what}", probe, timeout=timeout, interval=0.3)
    except TimeoutError:
        shown = f"{last[0].phase} — {last[0].reason} ({last[0].queue})" if last else "nothing"
        raise AssertionError(f"{name} never {what}; last seen: {shown}") from None


def observed(what: str, read: Any, settled: Any, timeout: float = 60) -> None:
    """Wait until `settled(read())`: a controller's status showing it has acted."""
    last: list[Any] = []

    def probe() -> bool:
        last[:] = [read()]
        return bool(last[0] is not None and settled(last[0]))

    try:
        wait_until(what, probe, timeout=timeout, interval=0.3)
    except TimeoutError:
        shown = (last[0].get("status") if isinstance(last[0], dict) else last[0]) if last else None
        raise AssertionError(f"never saw {what}; last status: {shown}") from None


def reconciled(obj: dict[str, Any]) -> bool:
    """The controller's status is of the object's current generation."""
    status = obj.get("status") or {}
    return bool(status.get("observedGeneration") == obj["metadata"]["generation"])


def delete_left(*made: tuple[str, ClusterService]) -> None:
    """Delete whichever of these (name, owner's service) clusters still exist."""
    for name, service in made:
        if service.backend.get(name) is not None:
            service.delete(name)


def test_a_queue_of_three_users_with_preemption_suspend_and_a_kubectl_cluster(
    team: Team, admin_api: k8s_client.ApiClient, tmp_path: Path
) -> None:
    alice, bob, carol = team.alice, team.bob, team.carol
    # Before anything runs: free now, as `capacity` and the dialog say.
    assert (
        bob.capacity({"gpus": 16, **SMALL}).text() == "16 × a100: free now (0 in use of 16 in gpus)"
    )

    # Alice takes all 16 GPUs: admitted at once, then Ready on the KWOK A100 nodes.
    made, _ = alice.create({"name": "all16", "gpus": 16, "workers": 2, **SMALL})
    assert made.queue is not None
    assert made.queue.name == "team"
    until(alice, "all16", lambda i: i.phase == Phase.READY, "Ready", 90)
    full = bob.capacity({"gpus": 8, **SMALL})
    assert full.free_now is False
    assert (
        full.text()
        == "8 × a100: queued: waits until GPUs in use are freed; 16 in use of 16 in gpus"
    )

    # Bob's and Carol's wait: 1st and 2nd, with the figures each may read.
    watch = Recorder(bob.backend)
    carol_watch = Recorder(carol.backend)
    # The admin overview: one cluster-wide watch, every user's place (and GPUs ahead).
    everyone = KubeRayBackend(SETTINGS, api_client=admin_api, namespace=team.namespaces["carol"],
                              watch_namespaces=["*"])  # fmt: skip
    overview = Recorder(everyone)
    try:
        bob.create({"name": "b8", "gpus": 8, "workers": 1, **SMALL})
        b8 = until(bob, "b8", lambda i: i.queue and i.queue.position == 1, "1st in the queue")
        assert (b8.phase, b8.reason) == (Phase.QUEUED, "1st in gpus (16 in use of 16)")
        assert (b8.head_ready, b8.workers_ready) == (False, 0)
        time.sleep(1.1)  # Kueue orders equal priorities by creation time, in whole seconds
        carol.create({"name": "c16", "gpus": 16, "workers": 2, **SMALL})
        c16 = until(carol, "c16", lambda i: i.queue and i.queue.position == 2, "2nd")
        assert c16.reason == "2nd in gpus (8 GPUs ahead of you; 16 in use of 16)"
        saw(watch, "b8", Phase.QUEUED, "1st in gpus (16 in use of 16)")
        saw(overview, "b8", Phase.QUEUED, "1st in gpus (16 in use of 16)")
        saw(overview, "c16", Phase.QUEUED, "2nd in gpus (8 GPUs ahead of you; 16 in use of 16)")
        assert any(c.name == "b8" and c.phase == Phase.QUEUED for c in bob.list())

        # A queued cluster is never idle and bills nothing.
        culler = Culler(bob.backend, settings(local_queue="team", idle_suspend_minutes={"a100": 1}),
                        meter=Meter(LocalLedger(tmp_path), flush_s=1e9, retention_s=1e9,
                                    max_gap_s=1e9))  # fmt: skip
        report = culler.sweep([b8])
        assert (report.read, report.suspended) == (0, [])
        assert culler.meter.observe([b8], time.time() + 3600) == {}

        # Alice's down admits Bob: his card goes Queued → Starting → Ready by itself,
        # and Carol, whose own cluster did not change, moves up to 1st.
        alice.delete("all16")
        saw(watch, "b8", Phase.READY)
        phases = [e.cluster.phase for e in watch.events if e.cluster.name == "b8"]
        assert phases.index(Phase.QUEUED) < phases.index(Phase.READY)
        assert Phase.STARTING in phases[phases.index(Phase.QUEUED) :]
        saw(carol_watch, "c16", Phase.QUEUED, "1st in gpus (8 in use of 16)")

        # A higher priority preempts a lower one, and both cards say so.
        with pytest.raises(SpecError, match="'urgent' is not a priority you may ask for"):
            alice.create({"name": "hi", "gpus": 16, "workers": 2, "priority": "urgent", **SMALL})
        alice.create({"name": "hi", "gpus": 16, "workers": 2, "priority": "high", **SMALL})
        saw(watch, "b8", Phase.QUEUED, "preempted by Kueue")
        hi = until(alice, "hi", lambda i: i.phase == Phase.READY, "Ready after preempting", 90)
        assert hi.queue is not None
        assert hi.queue.priority == "high"
        b8 = bob.get("b8")
        assert b8.phase == Phase.QUEUED
        assert "back in the queue" in b8.reason
        assert b8.queue is not None
        assert b8.queue.preempted

        # Alice's suspend frees her quota for the next in line, whoever Kueue ranks 1st.
        first = next(c for c in (bob.get("b8"), carol.get("c16")) if c.queue.position == 1)
        owner = bob if first.name == "b8" else carol
        suspended = alice.set_suspended("hi", True)
        assert suspended.phase == Phase.SUSPENDED
        until(
            alice,
            "hi",
            lambda i: i.reason.startswith("suspended: no pods running, out of Kueue queue team"),
            "suspended",
        )
        until(owner, first.name, lambda i: i.phase == Phase.READY, "Ready after the suspend", 90)
        # Her resume queues it again (Kueue decides when it runs, not raylab).
        resumed = alice.set_suspended("hi", False)
        assert resumed.phase in (Phase.QUEUED, Phase.STARTING, Phase.READY, Phase.PENDING)
        assert resumed.queue is not None
        assert resumed.queue.state != "Inactive"
    except BaseException:
        # Nothing of this test left in the queue for the next ones.
        delete_left(("all16", alice), ("b8", bob), ("c16", carol), ("hi", alice))
        raise
    finally:
        watch.close()
        carol_watch.close()
        overview.close()

    # A RayCluster made with kubectl, without raylab, is held by Kueue just the same.
    ns = team.namespaces["bob"]
    profiles = Profiles()
    spec = ClusterSpec.from_mapping({"name": "byhand", "gpus": 16, "workers": 2, **SMALL}, profiles)
    body = raycluster_manifest(
        spec, profiles.gpu_types["a100"], owner="bob", namespace=ns,
        image="rayproject/ray:2.60.0-py311-gpu", ray_version="2.60.0",
    )  # fmt: skip
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "team"}
    custom = k8s_client.CustomObjectsApi(admin_api)
    call_json(custom.create_namespaced_custom_object, *RAY, ns, "rayclusters", body)
    held = call_json(custom.get_namespaced_custom_object, *RAY, ns, "rayclusters", "byhand")
    assert held["spec"]["suspend"] is True  # Kueue's webhook, before any pod exists

    def workload_pending() -> bool:
        items = call_json(custom.list_namespaced_custom_object, *KUEUE, ns, "workloads")["items"]
        mine = [
            w
            for w in items
            if any(r["name"] == "byhand" for r in w["metadata"].get("ownerReferences", []))
        ]
        return bool(mine) and not any(
            c["type"] == "QuotaReserved" and c["status"] == "True"
            for c in mine[0].get("status", {}).get("conditions", [])
        )

    wait_until("a pending Workload for the kubectl cluster", workload_pending, timeout=30)
    # The operator has had its turn: its status of this generation says it holds the
    # cluster suspended, which it decides where it would otherwise create the pods.
    observed(
        "the KubeRay operator holding byhand suspended",
        lambda: call_json(custom.get_namespaced_custom_object, *RAY, ns, "rayclusters", "byhand"),
        lambda obj: reconciled(obj) and condition(obj, "RayClusterSuspended") == "True",
    )
    pods = call_json(k8s_client.CoreV1Api(admin_api).list_namespaced_pod, ns,
                     label_selector="ray.io/cluster=byhand")["items"]  # fmt: skip
    assert pods == []
    for name, service in (("b8", bob), ("c16", carol), ("hi", alice)):
        service.delete(name)
    call_json(custom.delete_namespaced_custom_object, *RAY, ns, "rayclusters", "byhand")


def test_up_waits_through_the_queue_and_gives_up_saying_where_it_stands(team: Team) -> None:
    alice, bob = team.alice, team.bob
    alice.create({"name": "hog", "gpus": 16, "workers": 2, **SMALL})
    until(alice, "hog", lambda i: i.phase == Phase.READY, "Ready", 90)
    bob.create({"name": "late", "gpus": 8, "workers": 1, **SMALL})
    seen: list[str] = []

    class View:
        def update(self, info: ClusterInfo | None = None, note: str | None = None) -> None:
            if info is not None:
                seen.append(f"{info.phase} — {info.reason}")

    with pytest.raises(WaitTimeout) as caught:
        bob.wait("late", lambda i: i.phase == Phase.READY, 3.0, View())
    assert str(caught.value.message).startswith(
        "cluster 'late' is still Queued after 3 s: 1st in gpus"
    )
    assert "it stays in the queue and starts when Kueue admits it" in str(caught.value.detail)
    assert any(s.startswith("Queued — 1st in gpus") for s in seen)
    assert bob.get("late").phase == Phase.QUEUED  # kept, still in the queue
    alice.delete("hog")
    until(bob, "late", lambda i: i.phase == Phase.READY, "Ready once admitted", 90)
    bob.delete("late")


def test_without_each_kueue_rule_its_step_fails_naming_it(
    team: Team, admin_api: k8s_client.ApiClient
) -> None:
    """The Role's Kueue rules are each needed (its other rules: test_rbac_rules.py):
    without `localqueues`, an `up` through the queue is refused naming it, and makes
    nothing; without `workloads`, the status of a queued cluster is. The third,
    `localqueues/pendingworkloads`, stays for the place in the queue of a user the admin
    did not bind to the queue viewer (docs/kueue.md): without both, status says Queued
    without a place, so no step fails."""
    alice, ns = team.alice, team.namespaces["alice"]
    alice.create({"name": "rules", "gpus": 1, "workers": 1, **SMALL})
    # The queue viewer's ClusterRole lists workloads everywhere: alice leaves it for now.
    bind_queue_viewer(admin_api, ["bob"], replace=True)
    try:
        with (
            without_rule(admin_api, "alice", "localqueues", namespace=ns),
            pytest.raises(Forbidden) as err,
        ):
            alice.create({"name": "rules-lq", "gpus": 1, "workers": 1, **SMALL})
        assert str(err.value) == (
            f"Kubernetes does not allow you to get localqueues.kueue.x-k8s.io in namespace {ns!r}"
        )
        assert [c.name for c in alice.list()] == ["rules"]
        with (
            without_rule(admin_api, "alice", "workloads", namespace=ns),
            pytest.raises(Forbidden) as err,
        ):
            alice.get("rules")
        assert str(err.value) == (
            f"Kubernetes does not allow you to list workloads.kueue.x-k8s.io in namespace {ns!r}"
        )
        assert alice.get("rules").queue is not None  # the rule back, the queue shows again
    finally:
        bind_queue_viewer(admin_api, ["alice", "bob"], replace=True)
        viewer = {"apiGroups": ["kueue.x-k8s.io"], "resources": ["clusterqueues"]}
        wait_until("alice a queue viewer again",
                   lambda: user_allowed(admin_api, "", "alice", viewer, "list"))  # fmt: skip
        alice.delete("rules")


def test_the_culler_suspends_a_running_queued_cluster_through_kueue(
    team: Team, admin_api: k8s_client.ApiClient
) -> None:
    """The culler's suspension (the one conditional patch every culler makes) of a
    cluster Kueue admitted: Kueue frees its GPUs for the next in line instead of
    starting it again, and it stays suspended until its owner resumes it."""
    alice, bob = team.alice, team.bob
    try:
        alice.create({"name": "idle16", "gpus": 16, "workers": 2, **SMALL})
        until(alice, "idle16", lambda i: i.phase == Phase.READY, "Ready", 90)
        bob.create({"name": "next8", "gpus": 8, "workers": 1, **SMALL})
        until(bob, "next8", lambda i: i.phase == Phase.QUEUED and i.queue.position == 1, "1st")
        now = float(int(time.time()))  # the annotation keeps whole seconds
        warned = IdleState(since=now - 3600, suspend_at=now - 1)
        assert alice.backend.update_idle("idle16", warned)
        done = IdleState(since=now - 3600, suspended_at=now)
        assert alice.backend.update_idle("idle16", done, expected=warned, suspend=True)
        # Why (the culler's word) and where (out of its queue), on every door.
        why, where = "suspended after 60 min idle at ", ", out of Kueue queue team"
        until(alice, "idle16",
              lambda i: i.phase == Phase.SUSPENDED and i.reason.startswith(why)
              and i.reason.endswith(where), "suspended by the culler")  # fmt: skip
        until(bob, "next8", lambda i: i.phase == Phase.READY, "Ready on the freed GPUs", 90)
        # Kueue has had its turn: it evicted the deactivated Workload, gave its quota to
        # next8, and its queue holds nothing pending, idle16 included.
        custom = k8s_client.CustomObjectsApi(admin_api)
        observed(
            "Kueue's eviction of idle16's deactivated Workload",
            lambda: workload_for(admin_api, team.namespaces["alice"], "idle16"),
            lambda wl: (
                wl["spec"].get("active") is False
                and condition(wl, "Evicted") == "True"
                and condition(wl, "QuotaReserved") == "False"
            ),
        )
        observed(
            "Kueue's queue running next8 alone, nothing pending",
            lambda: call_json(
                custom.get_cluster_custom_object, *KUEUE, "clusterqueues", CLUSTER_QUEUE
            ),
            lambda cq: (
                (cq.get("status") or {}).get("admittedWorkloads") == 1
                and (cq.get("status") or {}).get("pendingWorkloads") == 0
            ),
        )
        kept = alice.get("idle16")
        assert kept.phase == Phase.SUSPENDED
        assert kept.idle.suspended_at == done.suspended_at  # the culler's reason is kept
        # Its owner's resume puts it back in the queue, behind what now runs.
        resumed = alice.set_suspended("idle16", False)
        assert resumed.queue is not None
        assert resumed.queue.state == "Queued"
    finally:
        delete_left(("idle16", alice), ("next8", bob))


def test_the_command_line_says_capacity_and_place_and_refuses_a_priority_in_one_line(
    team: Team, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """`raylab` as bob on a laptop (his kubeconfig, the admin's jupyter_server_config.py):
    the words a user reads."""
    config = tmp_path / "jupyter"
    config.mkdir()
    (config / "jupyter_server_config.py").write_text(
        'c.Raylab.local_queue = "team"\nc.Raylab.priority_classes = ["normal", "high"]\n'
    )
    kubeconfig = user_kubeconfig(control_plane.kubeconfig("bob"), team.namespaces["bob"],
                                 tmp_path / "kc")  # fmt: skip

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "JUPYTERHUB_USER": "bob",
               "JUPYTER_CONFIG_DIR": str(config)}  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        argv = [sys.executable, "-m", "raylab.cli", *args, "--backend", "kuberay"]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                              check=False)  # fmt: skip

    team.alice.create({"name": "hog2", "gpus": 16, "workers": 2, **SMALL})
    until(team.alice, "hog2", lambda i: i.phase == Phase.READY, "Ready", 90)
    try:
        done = cli("capacity", "--gpus", "8", "--gpu-type", "a100")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "8 × a100: queued: waits until GPUs in use are freed; 16 in use of 16 in gpus",
            "Your quota: 16 of 16 GPUs and 4 of 4 clusters left.",
        ]
        size = ["--gpus", "8", "--gpu-type", "a100", "--cpus", "1", "--memory", "1Gi"]
        refused = cli("up", "--name", "nope", *size, "--priority", "urgent", "--no-wait")
        assert refused.returncode != 0
        said = refused.stderr.strip().splitlines()
        assert len(said) == 1, refused.stderr
        assert said[0].startswith("raylab: error: ")
        assert said[0].endswith("'urgent' is not a priority you may ask for; choose one of: "
                                "normal, high")  # fmt: skip
        made = cli("up", "--name", "cli8", *size, "--priority", "high", "--no-wait")
        assert made.returncode == 0, made.stderr
        lines = made.stdout.splitlines()
        assert lines[0] == (
            "8 × a100: queued: waits until GPUs in use are freed; 16 in use of 16 in gpus"
        )
        assert any(
            line.split() == ["Queue:", "team", "→", "gpus", "·", "priority", "high"]
            for line in lines
        ), made.stdout
        assert lines[-1].startswith("cli8 is Queued; ") or lines[-1].startswith("cli8 is Starting")
        listed = cli("list")
        assert listed.returncode == 0, listed.stderr
        assert any(line.startswith("cli8") for line in listed.stdout.splitlines())
    finally:
        team.alice.delete("hog2")
        cli("down", "cli8")


def test_the_server_tells_the_dialog_what_a_request_would_get(
    team: Team, control_plane: ControlPlane, admin_api: k8s_client.ApiClient, tmp_path: Path
) -> None:
    """The REST calls of the New-cluster dialog, on a real Jupyter server as alice."""
    options = (*NO_QUOTAS, "--Raylab.local_queue=team", "--Raylab.priority_classes=normal",
               "--Raylab.priority_classes=high")  # fmt: skip
    with raylab_server(control_plane, tmp_path, "kq-srv", options) as (server, namespace):
        apply_documented(admin_api, [namespace])
        profiles = server.get("raylab/profiles")
        assert profiles["queues"]["a100"] == "team"
        assert profiles["priority_classes"] == ["normal", "high"]
        assert "capacity" in profiles["features"]
        # Free once the earlier tests' clusters have left the queue.
        free = wait_until("the queue empty", lambda: (
            c := server.get("raylab/capacity?gpus=8&gpu_type=a100")["capacity"]
        )["free_now"] and c, timeout=60)  # fmt: skip
        assert free["text"] == "8 × a100: free now (0 in use of 16 in gpus)"
        status, body = server.post("raylab/clusters", {"name": "x", "gpus": 8, "workers": 1,
                                                        "priority": "urgent", **SMALL})  # fmt: skip
        assert (status, body["field"]) == (422, "priority"), body
        status, body = server.post("raylab/clusters", {"name": "dlg", "gpus": 8, "workers": 1,
                                                        "priority": "high", **SMALL})  # fmt: skip
        assert status == 201, body
        queue = body["cluster"]["queue"]
        assert (queue["name"], queue["priority"]) == ("team", "high")
        assert body["cluster"]["spec"]["priority"] == "high"
        # Once Kueue has admitted it (a moment later), 16 more would wait.
        after = wait_until("8 GPUs in use", lambda: (
            c := server.get("raylab/capacity?gpus=16&gpu_type=a100")["capacity"]
        )["free_now"] is False and c, timeout=60)  # fmt: skip
        assert after["text"] == (
            "16 × a100: queued: waits until GPUs in use are freed; 8 in use of 16 in gpus"
        )
        k8s_client.CustomObjectsApi(admin_api).delete_namespaced_custom_object(
            *RAY, namespace, "rayclusters", "dlg"
        )
