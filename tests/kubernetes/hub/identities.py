"""Kubernetes identities of the hub deployment, as docs/zero-to-jupyterhub.md sets them up.

Per user: a namespace `ray-<user>`, a service account `raylab-<user>` in the hub's
namespace, and the Role of docs/kubernetes-rbac.md bound to it in the user's namespace
only. The hub's culler service gets the Role of docs/culler.md in every user namespace;
the hub's admin, the ClusterRole of the admin overview (docs/kubernetes-rbac.md) too.

What differs from a real deployment, and why: the single-user servers are processes here,
not pods, so each gets a kubeconfig holding its service account's token (from the
TokenRequest API, as the kubelet mounts it in a pod) instead of the mounted token.
Outside a pod raylab reaches a head through a port-forward, so the culler's Role also
gets `pods/portforward` get (docs/culler.md says a culler outside Kubernetes needs it).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from ..kuberay_support import ROOT, documented_rbac

HUB_NAMESPACE = "jhub"
CULLER_DOC = ROOT / "docs" / "culler.md"
CULLER = "raylab-culler"
TOKEN_SECONDS = 4 * 3600  # longer than any test session; tokens are not refreshed here


def culler_role() -> dict[str, Any]:
    """The Role of docs/culler.md, as written there."""
    text = CULLER_DOC.read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```yaml\n")[1:]]
    docs = [yaml.safe_load(b) for b in blocks]
    role: dict[str, Any] = next(d for d in docs if d["kind"] == "Role")
    return role


def _bind(
    rbac: k8s_client.RbacAuthorizationV1Api, role: dict[str, Any], namespace: str, account: str
) -> None:
    role = copy.deepcopy(role)
    name = role["metadata"]["name"]
    role["metadata"] = {"name": name, "namespace": namespace}
    call_json(rbac.create_namespaced_role, namespace, role)
    binding = {
        "metadata": {"name": f"{name}-{account}", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE}],
    }
    call_json(rbac.create_namespaced_role_binding, namespace, binding)


class Identities:
    """Namespaces, service accounts, bindings and kubeconfigs; `close` deletes them."""

    def __init__(self, plane: ControlPlane, folder: Path) -> None:
        self.plane = plane
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.admin = plane.api_client("admin")
        self.core = k8s_client.CoreV1Api(self.admin)
        self.rbac = k8s_client.RbacAuthorizationV1Api(self.admin)
        self.namespaces: list[str] = []
        self.cluster_bindings: list[str] = []  # ClusterRole and ClusterRoleBinding names
        self._namespace(HUB_NAMESPACE)

    def _namespace(self, name: str) -> None:
        call_json(self.core.create_namespace, {"metadata": {"name": name}})
        self.namespaces.append(name)
        wait_until(
            f"ServiceAccount default in {name}",
            lambda: self.core.read_namespaced_service_account("default", name),
            timeout=60,
        )

    def _account(self, name: str) -> None:
        call_json(
            self.core.create_namespaced_service_account, HUB_NAMESPACE, {"metadata": {"name": name}}
        )

    def user(self, username: str, without: str | None = None) -> Path:
        """`ray-<username>` with the documented Role for `raylab-<username>` (less the rule
        for `without`, for a Role that misses a piece); the account's kubeconfig."""
        namespace, account = f"ray-{username}", f"raylab-{username}"
        self._namespace(namespace)
        self._account(account)
        role = documented_rbac()["Role"]
        if without:
            role["rules"] = [r for r in role["rules"] if without not in r["resources"]]
        _bind(self.rbac, role, namespace, account)
        self._wait_allowed(account, namespace)
        return self.kubeconfig(account, namespace)

    def overview_admin(self, username: str) -> Path:
        """A user's identity, plus the documented ClusterRole raylab-admin-overview bound
        to `raylab-<username>`, as its own ClusterRoleBinding; the account's kubeconfig."""
        kubeconfig = self.user(username)
        docs = documented_rbac()
        role, binding = docs["ClusterRole"], docs["ClusterRoleBinding"]
        account = f"raylab-{username}"
        binding["subjects"] = [
            {"kind": "ServiceAccount", "name": account, "namespace": HUB_NAMESPACE}
        ]
        call_json(self.rbac.create_cluster_role, role)
        self.cluster_bindings.append(role["metadata"]["name"])
        call_json(self.rbac.create_cluster_role_binding, binding)
        user = f"system:serviceaccount:{HUB_NAMESPACE}:{account}"
        auth = k8s_client.AuthorizationV1Api(self.admin)
        attributes = {"verb": "watch", "group": "ray.io", "resource": "rayclusters"}

        def allowed() -> bool:
            review = {"spec": {"user": user, "resourceAttributes": attributes}}
            body = call_json(auth.create_subject_access_review, review)
            return bool(body["status"].get("allowed"))

        wait_until(f"{account} may watch rayclusters in every namespace", allowed, timeout=30)
        return kubeconfig

    def culler(self, namespaces: list[str]) -> Path:
        self._account(CULLER)
        role = culler_role()
        forward = {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get"]}
        role["rules"].append(forward)
        for namespace in namespaces:
            _bind(self.rbac, role, namespace, CULLER)
            self._wait_allowed(CULLER, namespace)
        return self.kubeconfig(CULLER, namespaces[0])

    def _wait_allowed(self, account: str, namespace: str) -> None:
        """Until the binding applies (both Roles let their holder list pods)."""
        user = f"system:serviceaccount:{HUB_NAMESPACE}:{account}"
        auth = k8s_client.AuthorizationV1Api(self.admin)
        attributes = {"namespace": namespace, "verb": "list", "resource": "pods"}

        def allowed() -> bool:
            review = {"spec": {"user": user, "resourceAttributes": attributes}}
            body = call_json(auth.create_subject_access_review, review)
            return bool(body["status"].get("allowed"))

        wait_until(f"{account} may list pods in {namespace}", allowed, timeout=30)

    def kubeconfig(self, account: str, namespace: str) -> Path:
        """A kubeconfig with a token of `account`, its context naming `namespace`."""
        request = {"spec": {"expirationSeconds": TOKEN_SECONDS}}
        token = call_json(
            self.core.create_namespaced_service_account_token, account, HUB_NAMESPACE, request
        )["status"]["token"]
        doc = yaml.safe_load(self.plane.kubeconfig("admin").read_text())
        doc["users"] = [{"name": account, "user": {"token": token}}]
        doc["contexts"] = [
            {"name": account, "context": {"cluster": "raylab", "user": account,
                                          "namespace": namespace}}
        ]  # fmt: skip
        doc["current-context"] = account
        path = self.folder / f"{account}.yaml"
        path.write_text(yaml.safe_dump(doc))
        path.chmod(0o600)
        return path

    def close(self) -> None:
        for name in self.cluster_bindings:  # the binding and its role share the name
            with contextlib.suppress(ApiException):
                self.rbac.delete_cluster_role_binding(name)
            with contextlib.suppress(ApiException):
                self.rbac.delete_cluster_role(name)
        for name in reversed(self.namespaces):
            with contextlib.suppress(ApiException):
                self.core.delete_namespace(name, propagation_policy="Background")
        self.admin.close()


@contextlib.contextmanager
def identities(plane: ControlPlane, folder: Path) -> Iterator[Identities]:
    made = Identities(plane, folder)
    try:
        yield made
    finally:
        made.close()
