"""What keeps a KubeRay cluster its owner's: the token Secret, how Ray's containers read it,
and the NetworkPolicies around its pods. Pure: no I/O (security.py applies them).

KubeRay v1.5.0 (what raylab supports and tests) has no auth field: its `authOptions`
arrives in v1.5.1 and its NetworkPolicies in v1.7. So raylab does what KubeRay's own
manual sample does: a Secret with key `auth_token`, and `RAY_AUTH_MODE=token` plus
`RAY_AUTH_TOKEN` (from the Secret) on every Ray container. v1.5.0 copies the Ray
container's environment into the workers' `wait-gcs-ready` init container; the
autoscaler sidecar gets it from `autoscalerOptions.env`.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from ...auth import AUTH_MODE_ENV, SECRET_KEY, TOKEN_ENV
from .manifest import (
    CLIENT_PORT,
    DASHBOARD_PORT,
    GCS_PORT,
    METRICS_PORT,
    NODE_MANAGER_PORT,
    OBJECT_MANAGER_PORT,
    SERVE_PORT,
    WORKER_PORTS,
)

RAY_CLUSTER_LABEL = "ray.io/cluster"  # KubeRay labels every pod of a cluster with this
NODE_TYPE_LABEL = "ray.io/node-type"


def secret_name(cluster: str) -> str:
    return f"{cluster}-ray-token"


def head_policy_name(cluster: str) -> str:
    return f"{cluster}-ray-head"


def workers_policy_name(cluster: str) -> str:
    return f"{cluster}-ray-workers"


def token_secret(
    cluster: str, namespace: str, token: str, labels: Mapping[str, str]
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": secret_name(cluster), "namespace": namespace, "labels": dict(labels)},
        "type": "Opaque",
        "data": {SECRET_KEY: base64.b64encode(token.encode()).decode()},
    }


def auth_env(secret: str) -> list[dict[str, Any]]:
    """The env entries every Ray container (head, workers, autoscaler) carries, reading
    the token from the Secret named `secret`."""
    return [
        {"name": AUTH_MODE_ENV, "value": "token"},
        {
            "name": TOKEN_ENV,
            "valueFrom": {"secretKeyRef": {"name": secret, "key": SECRET_KEY}},
        },
    ]


def owner_reference(raycluster: Mapping[str, Any]) -> dict[str, Any]:
    """Makes an object a dependent of the RayCluster: Kubernetes' garbage collector
    deletes it with the cluster, and never before."""
    meta = raycluster["metadata"]
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "name": meta["name"],
        "uid": meta["uid"],
    }


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": n} for n in numbers]


def _driver_ports() -> list[dict[str, Any]]:
    """What a direct driver (a kernel joined as a node) reaches on every node of the
    cluster: its node manager, its object manager and its workers."""
    low, high = WORKER_PORTS
    return [*_ports(NODE_MANAGER_PORT, OBJECT_MANAGER_PORT),
            {"protocol": "TCP", "port": low, "endPort": high}]  # fmt: skip


def network_policies(
    cluster: str,
    namespace: str,
    labels: Mapping[str, str],
    clients: list[dict[str, Any]],
    operator: dict[str, Any],
    monitoring: dict[str, Any] | None,
) -> list[dict[str, Any]]:
    """Ingress rules for the head and for the workers of `cluster`.

    Every pod of the cluster talks to every other; the head's Ray Client and dashboard
    ports also admit `clients` (the owner's notebook pod, peers the admin adds) and the
    KubeRay operator (which reads the dashboard for RayJobs); `clients` also reach what a
    direct driver needs (the head's GCS, every node's node manager, object manager and
    worker ports); `monitoring` may scrape metrics. Nothing else reaches a Ray port. Pod
    labels are chosen by whoever makes a pod, so this separates users only when each
    user has a namespace of their own.
    """
    same_cluster = {"podSelector": {"matchLabels": {RAY_CLUSTER_LABEL: cluster}}}
    head_rules: list[dict[str, Any]] = [
        {"from": [same_cluster]},
        {"from": [*clients, operator], "ports": _ports(CLIENT_PORT, DASHBOARD_PORT)},
    ]
    worker_rules: list[dict[str, Any]] = [{"from": [same_cluster]}]
    if clients:  # an empty `from` would admit everyone
        head_rules.append({"from": list(clients), "ports": [*_ports(GCS_PORT), *_driver_ports()]})
        # Serve's apps (the owner's notebook and its Jupyter server's proxy), and the head's
        # metrics, read-only counters where the culler reads whether an app answers.
        head_rules.append({"from": list(clients), "ports": _ports(SERVE_PORT, METRICS_PORT)})
        worker_rules.append({"from": list(clients), "ports": _driver_ports()})
    if monitoring is not None:
        for rules in (head_rules, worker_rules):
            rules.append({"from": [monitoring], "ports": _ports(METRICS_PORT)})

    def policy(name: str, node_type: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "spec": {
                "podSelector": {
                    "matchLabels": {RAY_CLUSTER_LABEL: cluster, NODE_TYPE_LABEL: node_type}
                },
                "policyTypes": ["Ingress"],
                "ingress": rules,
            },
        }

    return [
        policy(head_policy_name(cluster), "head", head_rules),
        policy(workers_policy_name(cluster), "worker", worker_rules),
    ]


def peer(pod_labels: Mapping[str, str], namespace: str | None) -> dict[str, Any]:
    """A NetworkPolicy peer: pods with `pod_labels` in `namespace` (None: in any)."""
    # An empty selector selects everything (and is stored as `{}`, so it is written so).
    pods = {"matchLabels": dict(pod_labels)} if pod_labels else {}
    selector: dict[str, Any] = {"podSelector": pods}
    if namespace is None:
        selector["namespaceSelector"] = {}
    else:
        selector["namespaceSelector"] = {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
    return selector
