"""The Kubernetes rights of a pipeline's runs: what dagster-ray asks of the API server
to run a step on a RayJob of its own. EXPORT.md shows them as a Role (the tests apply
that Role from EXPORT.md, so what a user is told is what is tested)."""

from __future__ import annotations

import json
from typing import NamedTuple


class Rule(NamedTuple):
    group: str
    resources: tuple[str, ...]
    verbs: tuple[str, ...]
    why: str


RULES = (
    Rule("ray.io", ("rayjobs",), ("get", "list", "create", "patch", "delete"),
         "each step's RayJob: made, bound to the step's Ray Client session (`patch`), "
         "deleted when a step fails"),
    Rule("ray.io", ("rayjobs/status", "rayclusters", "rayclusters/status"), ("get",),
         "waiting until the RayJob's cluster is ready, and finding its head Service"),
    Rule("", ("endpoints",), ("get",), "the head Service answering before Ray Client connects"),
    Rule("", ("pods", "pods/log"), ("get",), "the head's log, shown when a step's cluster fails"),
)  # fmt: skip


def role_name(pipeline: str) -> str:
    return f"{pipeline.replace('_', '-').lower()}-runs"


def role_yaml(pipeline: str, namespace: str) -> str:
    """The Role, as YAML for `kubectl apply` (its lists in flow style, as JSON writes them)."""
    lines = [
        "apiVersion: rbac.authorization.k8s.io/v1",
        "kind: Role",
        "metadata:",
        f"  name: {role_name(pipeline)}",
        f"  namespace: {namespace}",
        "rules:",
    ]
    for rule in RULES:
        lines += [
            f"  - apiGroups: {json.dumps([rule.group])}",
            f"    resources: {json.dumps(list(rule.resources))}",
            f"    verbs: {json.dumps(list(rule.verbs))}",
        ]
    return "\n".join(lines) + "\n"
