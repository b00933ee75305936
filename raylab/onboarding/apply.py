"""Make a user's objects with server-side apply: idempotent, concurrent-safe, additive.

One field manager (`raylab-onboarding`) owns what onboarding writes. Applying the same
manifests again is a no-op for the API server (no write, resourceVersions unchanged),
and two hub replicas spawning the same user at once both succeed with each object made
once: an apply that finds no object creates it, one that loses that race applies over
the winner's. `force` takes the fields over from any other manager (a hand-made quota
is set back to the configured one at the next spawn). Nothing is ever deleted: removing
a user leaves their namespace and clusters where they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..backends.kuberay.errors import server_message, status_details, unreachable
from ..config import Settings
from .errors import OnboardingRefused, explain
from .objects import Plan, plan
from .settings import RaylabOnboarding

FIELD_MANAGER = "raylab-onboarding"
REQUEST_TIMEOUT = 30.0

# Where each kind lives in the API: (path prefix, plural).
_PATHS = {
    "Namespace": ("/api/v1", "namespaces"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "ResourceQuota": ("/api/v1", "resourcequotas"),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings"),
    "LocalQueue": ("/apis/kueue.x-k8s.io/v1beta2", "localqueues"),
}


@dataclass(frozen=True)
class Onboarded:
    """What a user's server needs from onboarding: where their clusters go, and the
    service account their pod runs as."""

    username: str
    namespace: str
    service_account: str
    service_account_namespace: str
    objects: tuple[str, ...]  # "Kind namespace/name", as applied


def onboard(
    api: Any,
    username: str,
    settings: Settings,
    onboarding: RaylabOnboarding,
    account_namespace: str | None = None,
    before_apply: Callable[[dict[str, Any]], None] | None = None,
) -> Onboarded:
    """Make (or bring back in line) `username`'s namespace, service account, quota,
    LocalQueues and RoleBinding with `api`'s credentials (the hub's).

    Raises OnboardingRefused naming the object and the API server's reason.
    `before_apply` sees each manifest first (tests use it to interleave replicas).
    """
    p = plan(username, settings, onboarding, account_namespace)
    applied = []
    for manifest in p.manifests:
        if before_apply is not None:
            before_apply(manifest)
        apply(api, manifest, p, onboarding)
        applied.append(describe(manifest))
    return Onboarded(
        username, p.namespace, p.service_account, p.service_account_namespace, tuple(applied)
    )


def describe(manifest: dict[str, Any]) -> str:
    meta = manifest["metadata"]
    where = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    return f"{manifest['kind']} {where}"


def object_path(manifest: dict[str, Any]) -> str:
    prefix, plural = _PATHS[manifest["kind"]]
    meta = manifest["metadata"]
    ns = f"/namespaces/{meta['namespace']}" if "namespace" in meta else ""
    return f"{prefix}{ns}/{plural}/{meta['name']}"


def apply(api: Any, manifest: dict[str, Any], p: Plan, onboarding: RaylabOnboarding) -> Any:
    """Server-side apply of one manifest; the object as the API server has it."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
    try:
        method, url, headers, body, post = api.param_serialize(
            "PATCH",
            object_path(manifest),
            query_params=query,
            header_params={
                "Content-Type": "application/apply-patch+yaml",
                "Accept": "application/json",
            },
            body=manifest,  # JSON is YAML
            auth_settings=["BearerToken"],
        )
        response = api.call_api(method, url, header_params=headers, body=body,
                                post_params=post, _request_timeout=REQUEST_TIMEOUT)  # fmt: skip
        response.read()
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
    except ApiException as exc:
        raise _refused(exc, manifest, p, onboarding) from exc
    except (HTTPError, OSError) as exc:
        error = unreachable(str(api.configuration.host), exc)
        meta = manifest["metadata"]
        raise OnboardingRefused(
            p.username, manifest["kind"], meta.get("namespace"), meta["name"], error.message,
            error.detail,
        ) from exc  # fmt: skip
    return json.loads(response.data)


def _refused(
    exc: Any, manifest: dict[str, Any], p: Plan, onboarding: RaylabOnboarding
) -> OnboardingRefused:
    kind, meta = manifest["kind"], manifest["metadata"]
    said = server_message(exc)
    detail = None
    if exc.status == 403:
        detail = (
            "the hub's service account needs the ClusterRole <prefix>-onboarding of the "
            "raylab Helm chart (onboarding.enabled), or the rule named"
        )
    elif exc.status == 404 and kind == "LocalQueue" and not status_details(exc):
        said = "no kueue.x-k8s.io/v1beta2 LocalQueue API: Kueue is not installed"
        detail = "install Kueue, or unset c.RaylabOnboarding.cluster_queue"
    reason = explain(kind, said, onboarding.cluster_role)
    return OnboardingRefused(p.username, kind, meta.get("namespace"), meta["name"], reason,
                             detail)  # fmt: skip
