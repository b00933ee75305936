"""The admin of the overview across users' namespaces: a service account with the
ClusterRole raylab-admin-overview of docs/kubernetes-rbac.md, as a hub admin's
single-user pod would have, and the namespaces of alice and bob."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client

from .kuberay_support import documented_rbac, grant, new_namespace


@contextlib.contextmanager
def user_namespaces(admin_api: k8s_client.ApiClient) -> Iterator[tuple[str, str, str]]:
    """(the admin's own namespace, alice's, bob's), each user with the documented Role."""
    with (
        new_namespace(admin_api, "rl-adm") as home,
        new_namespace(admin_api, "rl-alice") as a,
        new_namespace(admin_api, "rl-bob") as b,
    ):
        grant(admin_api, a, "alice")
        grant(admin_api, b, "bob")
        yield home, a, b


def account_token(admin_api: k8s_client.ApiClient, namespace: str, name: str) -> str:
    """A token of a new service account (what the kubelet mounts in its pod)."""
    core = k8s_client.CoreV1Api(admin_api)
    call_json(core.create_namespaced_service_account, namespace, {"metadata": {"name": name}})
    request = {"spec": {"expirationSeconds": 3600}}
    body = call_json(core.create_namespaced_service_account_token, name, namespace, request)
    return str(body["status"]["token"])


def client_with(admin_api: k8s_client.ApiClient, token: str) -> Any:
    base = admin_api.configuration
    conf = k8s_client.Configuration()
    conf.host, conf.ssl_ca_cert = base.host, base.ssl_ca_cert
    conf.api_key = {"authorization": f"Bearer {token}"}
    return k8s_client.ApiClient(conf)


def kubeconfig_with(plane: ControlPlane, token: str, namespace: str, path: Path) -> Path:
    """A kubeconfig holding `token`, its context naming `namespace`."""
    doc = yaml.safe_load(plane.kubeconfig("admin").read_text())
    doc["users"] = [{"name": "account", "user": {"token": token}}]
    context = {"cluster": "raylab", "user": "account", "namespace": namespace}
    doc["contexts"] = [{"name": "account", "context": context}]
    doc["current-context"] = "account"
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def overview_admin(admin_api: k8s_client.ApiClient, home: str) -> Iterator[str]:
    """The token of `raylab-admin` in `home`, bound to the documented ClusterRole for as
    long as this lasts (both are cluster-wide: deleted afterwards)."""
    token = account_token(admin_api, home, "raylab-admin")
    docs = documented_rbac()
    role, binding = docs["ClusterRole"], docs["ClusterRoleBinding"]
    binding["subjects"][0]["namespace"] = home
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    call_json(rbac.create_cluster_role, role)
    call_json(rbac.create_cluster_role_binding, binding)
    user = f"system:serviceaccount:{home}:raylab-admin"
    attributes = {"verb": "watch", "group": "ray.io", "resource": "rayclusters"}

    def allowed() -> bool:
        review = {"spec": {"user": user, "resourceAttributes": attributes}}
        auth = k8s_client.AuthorizationV1Api(admin_api)
        return bool(call_json(auth.create_subject_access_review, review)["status"]["allowed"])

    try:
        wait_until("the admin may watch rayclusters everywhere", allowed, timeout=30)
        yield token
    finally:
        with contextlib.suppress(Exception):
            call_json(rbac.delete_cluster_role_binding, binding["metadata"]["name"])
        with contextlib.suppress(Exception):
            call_json(rbac.delete_cluster_role, role["metadata"]["name"])
