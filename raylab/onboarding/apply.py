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
from .errors import ConfigMapUnreadable, OnboardingRefused, explain
from .objects import Plan, copies_config, plan, pod_namespace
from .settings import RaylabOnboarding

FIELD_MANAGER = "raylab-onboarding"
REQUEST_TIMEOUT = 30.0

# Where each kind lives in the API: (path prefix, plural).
_PATHS = {
    "Namespace": ("/api/v1", "namespaces"),
    "ServiceAccount": ("/api/v1", "serviceaccounts"),
    "ConfigMap": ("/api/v1", "configmaps"),
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
    hub_namespace: str | None = None,
) -> Onboarded:
    """Make (or bring back in line) `username`'s namespace, service account, quota,
    LocalQueues and RoleBinding with `api`'s credentials (the hub's), and a copy of the
    chart's settings ConfigMap where their pod cannot mount the original.

    `hub_namespace`: the hub's own, where that ConfigMap is unless
    c.RaylabOnboarding.config_map_namespace says (neither: no copy).
    Raises OnboardingRefused naming the object and the API server's reason.
    `before_apply` sees each manifest first (tests use it to interleave replicas).
    """
    pod_ns = pod_namespace(username, settings, account_namespace)
    config_ns = onboarding.config_map_namespace or hub_namespace
    config = None
    if config_ns and copies_config(onboarding, pod_ns, config_ns):
        # The chart's ConfigMap itself, not the settings the hub loaded: the user's pod
        # then sees exactly what pods in the chart's namespace mount (the hub's own
        # hub.config overrides are the hub's, and traitlets cannot write back JSON as
        # the admin wrote it). Read at each spawn, so a changed chart reaches the user
        # at their next one.
        config = read_config_map(api, username, onboarding, config_ns, pod_ns)
    p = plan(username, settings, onboarding, account_namespace, config)
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


def _call(api: Any, method: str, path: str, query: list[tuple[str, str]],
          body: Any = None) -> Any:  # fmt: skip
    """One request; the JSON answer. Raises ApiException for any status but 2xx."""
    from kubernetes.client.exceptions import ApiException

    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = "application/apply-patch+yaml"
    method, url, headers, body, post = api.param_serialize(
        method, path, query_params=query, header_params=headers, body=body,
        auth_settings=["BearerToken"],
    )  # fmt: skip
    response = api.call_api(method, url, header_params=headers, body=body,
                            post_params=post, _request_timeout=REQUEST_TIMEOUT)  # fmt: skip
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(response.data)


def read_config_map(api: Any, username: str, onboarding: RaylabOnboarding, namespace: str,
                    pod_ns: str) -> dict[str, Any]:  # fmt: skip
    """The chart's settings ConfigMap, or ConfigMapUnreadable saying what to do."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    name = onboarding.config_map
    path = f"/api/v1/namespaces/{namespace}/configmaps/{name}"
    try:
        found: dict[str, Any] = _call(api, "GET", path, [])
    except ApiException as exc:
        raise ConfigMapUnreadable(username, namespace, name, pod_ns, server_message(exc),
                                  exc.status) from exc  # fmt: skip
    except (HTTPError, OSError) as exc:
        error = unreachable(str(api.configuration.host), exc)
        raise ConfigMapUnreadable(username, namespace, name, pod_ns, error.message) from exc
    return found


def apply(api: Any, manifest: dict[str, Any], p: Plan, onboarding: RaylabOnboarding) -> Any:
    """Server-side apply of one manifest; the object as the API server has it."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
    try:
        # JSON is YAML.
        return _call(api, "PATCH", object_path(manifest), query, body=manifest)
    except ApiException as exc:
        raise _refused(exc, manifest, p, onboarding) from exc
    except (HTTPError, OSError) as exc:
        error = unreachable(str(api.configuration.host), exc)
        meta = manifest["metadata"]
        raise OnboardingRefused(
            p.username, manifest["kind"], meta.get("namespace"), meta["name"], error.message,
            error.detail,
        ) from exc  # fmt: skip


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
