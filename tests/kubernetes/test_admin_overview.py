"""An admin's KubeRay backend watching every namespace, with the ClusterRole of
docs/kubernetes-rbac.md bound to its service account, against the real API server and
operator: alice's and bob's clusters, both named `exp`, in their own namespaces."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from controlplane import wait_until
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.culler.ledger import Interval
from raylab.culler.ledger_store import KubeRayLedger
from raylab.errors import Forbidden, NotFound
from raylab.model import ClusterInfo, Phase
from raylab.service import ClusterService
from raylab.spec import ClusterSpec

from .admin_support import account_token, client_with, overview_admin, user_namespaces
from .kuberay_support import Recorder, documented_rbac, settings, without_rule

SETTINGS = settings()


def spec(name: str, workers: int) -> ClusterSpec:
    fields = {"name": name, "cpus": "1", "memory": "1Gi", "workers": workers}
    return ClusterSpec.from_mapping(fields, SETTINGS.profiles)


@pytest.fixture(scope="module")
def spaces(admin_api: k8s_client.ApiClient) -> Iterator[tuple[str, str, str]]:
    with user_namespaces(admin_api) as made:
        yield made


@pytest.fixture(scope="module")
def overseer(admin_api: k8s_client.ApiClient, spaces: tuple[str, str, str]) -> Iterator[Any]:
    """An ApiClient of the admin's service account, holding the documented ClusterRole."""
    with overview_admin(admin_api, spaces[0]) as token, client_with(admin_api, token) as api:
        yield api


def latest(recorder: Recorder, namespace: str, name: str) -> tuple[str, ClusterInfo] | None:
    """The last event the watch yielded for that cluster: (type, what it said)."""
    found = [e for e in list(recorder.events)
             if (e.cluster.namespace, e.cluster.name) == (namespace, name)]  # fmt: skip
    return (found[-1].type, found[-1].cluster) if found else None


def test_an_admin_watch_sees_every_namespace_and_tells_same_names_apart(
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
    overseer: Any,
    spaces: tuple[str, str, str],
) -> None:
    home, a, b = spaces
    alice = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=a)
    bob = KubeRayBackend(SETTINGS, api_client=bob_api, namespace=b)
    alice.create(spec("exp", workers=1), "alice")
    admin = KubeRayBackend(SETTINGS, api_client=overseer, namespace=home, watch_namespaces=["*"])
    recorder = Recorder(admin)
    try:
        # bob's cluster, of the same name, made while the admin is already watching.
        wait_until("the admin sees alice's exp", lambda: latest(recorder, a, "exp"), 60, 0.1)
        bob.create(spec("exp", workers=0), "bob")

        def ready(namespace: str) -> ClusterInfo | None:
            event = latest(recorder, namespace, "exp")
            return event[1] if event and event[1].phase == Phase.READY else None

        mine = wait_until("alice's exp Ready, seen by the admin", lambda: ready(a), 90, 0.2)
        his = wait_until("bob's exp Ready, seen by the admin", lambda: ready(b), 90, 0.2)
        # Each with its owner and its own pods: alice's worker is not counted for bob.
        assert (mine.owner, mine.workers_ready, mine.head_ready) == ("alice", 1, True)
        assert (his.owner, his.workers_ready, his.head_ready) == ("bob", 0, True)

        listed = [(i.namespace, i.name, i.owner) for i in admin.clusters()
                  if i.namespace in spaces]  # fmt: skip
        assert listed == [(a, "exp", "alice"), (b, "exp", "bob")]
        # Listing namespaces by name: only those (and its own).
        only_alice = KubeRayBackend(
            SETTINGS, api_client=overseer, namespace=home, watch_namespaces=[a]
        )
        assert [(i.namespace, i.owner) for i in only_alice.clusters()] == [(a, "alice")]

        # The admin manages bob's cluster in his namespace; the same name in its own
        # namespace is nothing.
        service = ClusterService(admin, SETTINGS, "root", admin=True)
        with pytest.raises(NotFound, match="no cluster named 'exp'"):
            service.get("exp")
        # Scaling takes bob's quota Lease in his namespace (the ClusterRole allows it).
        assert service.scale("exp", 1, namespace=b).workers_desired == 1
        assert service.set_suspended("exp", True, namespace=b).spec.name == "exp"
        wait_until(
            "the admin sees bob's exp suspended",
            lambda: (latest(recorder, b, "exp") or ("", mine))[1].phase == Phase.SUSPENDED,
            60,
            0.1,
        )
        assert bob.get("exp").phase == Phase.SUSPENDED  # type: ignore[union-attr]
        assert (latest(recorder, a, "exp") or ("", mine))[1].phase == Phase.READY
        service.delete("exp", namespace=b)
        wait_until(
            "the admin sees bob's exp go",
            lambda: (latest(recorder, b, "exp") or ("",))[0] == "DELETED",
            60,
            0.1,
        )
        assert (latest(recorder, a, "exp") or ("",))[0] != "DELETED"
        assert [(i.namespace, i.owner) for i in admin.clusters() if i.namespace in spaces] == [
            (a, "alice")
        ]
    finally:
        recorder.close()
        alice.delete("exp", propagation="Background")


def test_without_the_cluster_role_the_admin_is_told_what_to_bind(
    admin_api: k8s_client.ApiClient, spaces: tuple[str, str, str]
) -> None:
    home = spaces[0]
    with client_with(admin_api, account_token(admin_api, home, "unbound-admin")) as api:
        backend = KubeRayBackend(SETTINGS, api_client=api, namespace=home, watch_namespaces=["*"])
        with pytest.raises(Forbidden) as err:
            backend.clusters()
    assert "list rayclusters.ray.io in every namespace" in err.value.message
    assert "raylab-admin-overview" in str(err.value.detail)


def test_an_admin_counts_everyones_gpu_hours_across_namespaces(
    alice_api: k8s_client.ApiClient,
    bob_api: k8s_client.ApiClient,
    overseer: Any,
    spaces: tuple[str, str, str],
) -> None:
    """Each user's GPU-hours ledger sits in their own namespace (written by their own
    server's culler); the admin's `usage --all` reads them all with the ClusterRole."""
    home, a, b = spaces
    now = time.time()
    for api, namespace, owner, gpus in ((alice_api, a, "alice", 2), (bob_api, b, "bob", 1)):
        backend = KubeRayBackend(SETTINGS, api_client=api, namespace=namespace)
        row = Interval(uid=f"uid-{owner}", cluster="exp", owner=owner, gpu_type="a100",
                       gpus=gpus, start=now - 3600, end=now)  # fmt: skip
        KubeRayLedger(backend).save(owner, [row], keep_after=now - 86400)
    seen = {}
    for watched in (["*"], [a, b]):
        admin = KubeRayBackend(SETTINGS, api_client=overseer, namespace=home,
                               watch_namespaces=watched)  # fmt: skip
        rows = KubeRayLedger(admin).load(None, {})
        seen[watched[0]] = sorted((i.owner, i.gpus) for i in rows if i.uid.startswith("uid-"))
    assert seen == {"*": [("alice", 2), ("bob", 1)], a: [("alice", 2), ("bob", 1)]}
    # A user's own server still reads only its own namespace.
    alone = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=a)
    assert [i.owner for i in KubeRayLedger(alone).load(None, {})] == ["alice"]


# --- the overview's rights, rule by rule ----------------------------------------------

Step = Callable[[ClusterService, str], object]
# Each rule of the documented ClusterRole (by its first resource): the admin's step that
# needs it, and the verb refused first. `events` goes with `pods` (one rule); patch and
# delete on rayclusters go with its list: without it the overview shows nothing.
OVERVIEW_STEPS: dict[str, tuple[str, Step, str]] = {
    "rayclusters": ("the overview", lambda s, ns: s.list(everyone=True), "list"),
    "pods": ("the overview (the clusters' pods)", lambda s, ns: s.list(everyone=True), "list"),
    "configmaps": ("everyone's GPU-hours", lambda s, ns: s.usage(3600, everyone=True), "list"),
    "leases": (
        "scaling a user's cluster",
        lambda s, ns: s.scale("rules", 0, namespace=ns),
        "create",
    ),
}
# Used only with Kueue (test_kueue.py: the queue's place and suspending a queued cluster).
OVERVIEW_KUEUE = {"workloads", "clusterqueues", "clusterqueues/pendingworkloads"}


def test_every_overview_rule_is_accounted_for() -> None:
    rules = [r["resources"][0] for r in documented_rbac()["ClusterRole"]["rules"]]
    assert sorted(rules) == sorted([*OVERVIEW_STEPS, *OVERVIEW_KUEUE])


def test_without_each_overview_rule_its_step_fails_naming_it(
    admin_api: k8s_client.ApiClient,
    alice_api: k8s_client.ApiClient,
    overseer: Any,
    spaces: tuple[str, str, str],
) -> None:
    home, a, _ = spaces
    alice = ClusterService(KubeRayBackend(SETTINGS, api_client=alice_api, namespace=a),
                           SETTINGS, "alice")  # fmt: skip
    alice.create({"name": "rules", "cpus": "1", "memory": "1Gi", "workers": 0})
    admin = KubeRayBackend(SETTINGS, api_client=overseer, namespace=home, watch_namespaces=["*"])
    service = ClusterService(admin, SETTINGS, "root", admin=True)
    user = f"system:serviceaccount:{home}:raylab-admin"
    try:
        for resource, (step, run, verb) in OVERVIEW_STEPS.items():
            with (
                without_rule(admin_api, user, resource, kind="ClusterRole"),
                pytest.raises(Forbidden) as err,
            ):
                run(service, a)
            assert f"Kubernetes does not allow you to {verb} {resource}" in str(err.value), (
                step,
                str(err.value),
            )
            run(service, a)  # the rule back, it works
    finally:
        alice.delete("rules")
