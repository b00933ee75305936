"""The users' Role is the least that works: without each of its rules, in turn, the step
that needs it fails for its user with one message naming the verb, the resource and the
namespace (docs/kubernetes-rbac.md, the chart's <prefix>-user ClusterRole, which
test_helm_chart.py holds equal to it).

One cluster is made by alice with the whole Role; then her RoleBinding points, one rule
at a time, at a Role without that rule. The cluster's pods are on the KWOK nodes (Ready
at once, no Ray processes): RBAC refuses before any request reaches a node, so nothing
here needs Ray to run. Kueue's three rules are checked in test_kueue.py, where Kueue runs.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s_client

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.errors import Forbidden
from raylab.service import ClusterService

from .kuberay_support import (
    documented_rbac,
    grant,
    is_ready,
    new_namespace,
    settings,
    wait_info,
    without_rule,
)

SETTINGS = settings()
NAME = "rules"
# Checked in test_kueue.py, where Kueue runs.
KUEUE_RULES = {"workloads", "localqueues", "localqueues/pendingworkloads"}


def spec(name: str) -> dict[str, Any]:
    return {"name": name, "cpus": "1", "memory": "1Gi", "workers": 0}


# Each rule: the step a user takes that needs it, and the verb it is refused first.
Step = Callable[[ClusterService, KubeRayBackend], object]
STEPS: dict[str, tuple[str, Step, str]] = {
    "rayclusters": ("%raycluster list", lambda s, b: s.list(), "list"),
    "pods": ("%raycluster status", lambda s, b: s.get(NAME), "list"),
    "pods/log": ("%raycluster logs", lambda s, b: s.logs(NAME), "get"),
    # Connecting from outside the Kubernetes cluster: its port-forward to the head.
    "pods/portforward": (
        "%raycluster connect (port-forward)",
        lambda s, b: b.port_forward(NAME, 10001),
        "get",
    ),
    "secrets": ("%raycluster connect (its Ray token)", lambda s, b: s.auth_token(NAME), "get"),
    "networkpolicies": ("%raycluster up", lambda s, b: s.create(spec("rules-np")), "create"),
    "configmaps": ("%raycluster usage", lambda s, b: s.usage(3600), "get"),
    "leases": ("%raycluster scale", lambda s, b: s.scale(NAME, 0), "create"),
}
# Rules that stay though no step fails without them, and why.
OPTIONAL = {
    # A cluster the operator refused shows as Pending instead of Failed with its reason
    # (tests/kubernetes/test_kuberay_errors.py shows the reason with the rule).
    "events": ("%raycluster status", lambda s, b: s.get(NAME)),
}


def test_every_rule_has_its_step() -> None:
    """A rule added to the Role without a step here fails this test: it is either
    needed by a step (and checked below), optional with a reason, or not needed."""
    rules = [r["resources"][0] for r in documented_rbac()["Role"]["rules"]]
    assert len(rules) == len(set(rules))
    assert sorted(rules) == sorted([*STEPS, *OPTIONAL, *KUEUE_RULES])


@pytest.fixture(scope="module")
def cluster(admin_api: k8s_client.ApiClient, alice_api: k8s_client.ApiClient) -> Iterator[
    tuple[str, ClusterService, KubeRayBackend]
]:  # fmt: skip
    with new_namespace(admin_api, "rl-rules") as ns:
        grant(admin_api, ns, "alice")
        backend = KubeRayBackend(SETTINGS, api_client=alice_api, namespace=ns)
        service = ClusterService(backend, SETTINGS, "alice")
        service.create(spec(NAME))
        wait_info(backend, NAME, is_ready, "Ready on the KWOK nodes")
        yield ns, service, backend


@pytest.mark.parametrize("resource", sorted([*STEPS, *OPTIONAL]))
def test_without_the_rule_its_step_fails_naming_it(
    resource: str,
    cluster: tuple[str, ClusterService, KubeRayBackend],
    admin_api: k8s_client.ApiClient,
) -> None:
    """An optional rule's step still works without it, only showing less."""
    ns, service, backend = cluster
    if resource in OPTIONAL:
        with without_rule(admin_api, "alice", resource, namespace=ns):
            info = OPTIONAL[resource][1](service, backend)
        assert getattr(info, "name", None) == NAME  # the cluster, shown
        return
    step, run, verb = STEPS[resource]
    with (
        without_rule(admin_api, "alice", resource, namespace=ns) as rule,
        pytest.raises(Forbidden) as err,
    ):
        run(service, backend)
    group = rule["apiGroups"][0]
    shown = f"{resource}.{group}" if group else resource
    message = str(err.value)
    assert re.fullmatch(
        rf"Kubernetes does not allow you to {verb} {re.escape(shown)}( \S+)? in namespace '{ns}'",
        message,
    ), (step, message)
    assert "docs/kubernetes-rbac.md" in str(err.value.detail), (step, err.value.detail)
    # With the rule back, the same step works (the cluster is as it was), except where it
    # goes on to a KWOK node, which has no kubelet to read a log from or forward to.
    if resource not in ("pods/log", "pods/portforward"):
        run(service, backend)
