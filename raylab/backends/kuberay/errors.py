"""Kubernetes client failures -> raylab errors that say what to do.

Users of codeflare-sdk met bare `ConnectionError`s and RBAC refusals with no guidance;
every failure here names what was tried (verb, resource, namespace, API server) and
who can fix it.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from ...errors import BackendUnavailable, Conflict, Forbidden, NotFound, RaylabError

RBAC_DOC = "docs/kubernetes-rbac.md"
# "<urllib3.connection.HTTPSConnection object at 0x...>: " (urllib3 1.x) or
# "HTTPSConnection(host='127.0.0.1', port=6443): " (urllib3 2.x)
_OBJECT_REPR = re.compile(r"(<[^>]*>|\w+Connection\([^)]*\)): ")
_ERRNO = re.compile(r"\[Errno -?\d+\] ")


# Call.namespace of a cluster-wide request (admin_watch_namespaces = ["*"]).
ALL_NAMESPACES = "*"


@dataclass(frozen=True)
class Call:
    """What a request was doing, for the message."""

    verb: str  # RBAC verb: get, list, watch, create, patch, delete
    resource: str  # rayclusters, pods, pods/log, events, ...
    namespace: str
    server: str
    name: str | None = None

    @property
    def group(self) -> str:
        if self.resource.startswith("rayclusters"):
            return "ray.io"
        if self.resource.endswith("/pendingworkloads"):
            return "visibility.kueue.x-k8s.io"
        kueue = ("workloads", "localqueues", "clusterqueues", "workloadpriorityclasses")
        if self.resource in kueue:
            return "kueue.x-k8s.io"
        groups = {"networkpolicies": "networking.k8s.io", "leases": "coordination.k8s.io"}
        return groups.get(self.resource, "")


class Refused(RaylabError):
    """Kubernetes refused the request itself (400, 422); `said` is its own reason."""

    code = "refused"

    def __init__(self, message: str, said: str, detail: str | None = None) -> None:
        super().__init__(message, detail)
        self.said = said


def translate(exc: BaseException, call: Call) -> RaylabError | None:
    """The raylab error for a client exception, or None for one we do not know."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    if isinstance(exc, ApiException):
        return _from_status(exc, call)
    if isinstance(exc, HTTPError | OSError):
        return unreachable(call.server, exc)
    return None


@contextlib.contextmanager
def api_errors(call: Call) -> Iterator[None]:
    """Raise the translated error for anything the client raises inside.

    The one idiom of the KubeRay backend: every API call runs inside it, and a caller
    that expects an outcome (gone, changed meanwhile, not allowed) catches raylab's
    error for it (NotFound, Conflict, Refused, Forbidden), never a status code.
    """
    try:
        yield
    except RaylabError:
        raise
    except Exception as exc:
        error = translate(exc, call)
        if error is None:
            raise
        raise error from exc


def unreachable(server: str, exc: BaseException) -> BackendUnavailable:
    return BackendUnavailable(
        f"cannot reach Kubernetes at {server}: {short_reason(exc)}",
        detail="check that the API server is up and that KUBECONFIG (or the pod's service "
        "account) points at it; raylab retries on the next command",
    )


def short_reason(exc: BaseException) -> str:
    """'connection refused', not a urllib3 repr with object addresses and retry counts."""
    reason: Any = getattr(exc, "reason", None) or exc
    text = str(reason)
    if "Caused by" in text:  # MaxRetryError(... Caused by NewConnectionError(...))
        text = text.split("Caused by", 1)[1]
    text = _ERRNO.sub("", _OBJECT_REPR.sub("", text)).strip(" ()'\"")
    text = text.removeprefix("Failed to establish a new connection: ")
    return (text[:200] or type(exc).__name__).rstrip("'\")")


def server_message(exc: Any) -> str:
    """The `message` of a Kubernetes Status body, else the body or the HTTP reason."""
    body = getattr(exc, "body", None)
    if isinstance(body, bytes):
        body = body.decode(errors="replace")
    if isinstance(body, str) and body.strip():
        try:
            parsed = json.loads(body)
        except ValueError:
            return body.strip()[:300]
        if isinstance(parsed, dict) and parsed.get("message"):
            return str(parsed["message"])
    return str(getattr(exc, "reason", "") or "no details")


def status_details(exc: Any) -> dict[str, Any]:
    body = getattr(exc, "body", None)
    try:
        parsed = json.loads(body) if body else None
    except (TypeError, ValueError):
        return {}
    if isinstance(parsed, dict) and isinstance(parsed.get("details"), dict):
        details: dict[str, Any] = parsed["details"]
        return details
    return {}


def is_missing_api(exc: Any) -> bool:
    """404 without a Status body: the API (the RayCluster CRD) does not exist at all.

    A missing object or namespace comes back as a JSON Status naming it instead.
    """
    return getattr(exc, "status", None) == HTTPStatus.NOT_FOUND and not status_details(exc)


def kuberay_missing(call: Call) -> BackendUnavailable:
    return BackendUnavailable(
        f"KubeRay is not installed in the Kubernetes cluster at {call.server} (namespace "
        f"{call.namespace}): no ray.io/v1 RayCluster API",
        detail="ask your admin to install the KubeRay operator and its CRDs (v1.5 or later), "
        "or use --backend local",
    )


def kueue_missing(call: Call) -> BackendUnavailable:
    what = "visibility API" if call.group.startswith("visibility") else f"{call.resource} API"
    return BackendUnavailable(
        f"Kueue is not installed in the Kubernetes cluster at {call.server}: no "
        f"{call.group} {what}, and c.Raylab.local_queue asks for it",
        detail="ask your admin to install Kueue (docs/kueue.md), or to unset local_queue "
        "so that clusters start without queueing",
    )


def forbidden(call: Call, message: str) -> Forbidden:
    what = f"{call.resource}.{call.group}" if call.group else call.resource
    if call.namespace == ALL_NAMESPACES:  # an admin's cluster-wide overview
        return Forbidden(
            f"Kubernetes does not allow you to {call.verb} {what} in every namespace",
            detail=f"ask your admin to bind the ClusterRole raylab-admin-overview of "
            f"{RBAC_DOC} to you, or list namespaces in admin_watch_namespaces "
            f"(the API server said: {message})",
        )
    return Forbidden(
        f"Kubernetes does not allow you to {call.verb} {what} in namespace {call.namespace!r}",
        detail=f"ask your admin to grant the Role in {RBAC_DOC} in that namespace "
        f"(the API server said: {message})",
    )


def _from_handshake(reason: str, call: Call) -> RaylabError:
    """A failed websocket upgrade, which the client packs as
    'Handshake status 403 Forbidden -+-+- {headers} -+-+- body'."""
    parts = [p.strip() for p in reason.split("-+-+-")]
    body = parts[-1] if len(parts) > 1 else ""
    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    if isinstance(parsed, dict) and parsed.get("reason") == "Forbidden":
        return forbidden(call, str(parsed.get("message")))
    message = parsed.get("message") if isinstance(parsed, dict) else body
    summary = f"{parts[0]}: {message}" if message else parts[0]
    return BackendUnavailable(
        f"Kubernetes at {call.server} refused the {call.resource} connection: {summary}"
    )


def _from_status(exc: Any, call: Call) -> RaylabError:
    status = exc.status
    message = server_message(exc)
    if status == 0:  # the client's wrapper for websocket failures (port-forward)
        return _from_handshake(str(exc.reason), call)
    if status == HTTPStatus.UNAUTHORIZED:
        return Forbidden(
            f"Kubernetes at {call.server} did not accept your credentials ({message})",
            detail="your token or kubeconfig has expired or is wrong; log in again",
        )
    if status == HTTPStatus.FORBIDDEN:
        return forbidden(call, message)
    if status == HTTPStatus.NOT_FOUND:
        if is_missing_api(exc) and "kueue" in call.group:
            return kueue_missing(call)
        if is_missing_api(exc) and call.group:
            return kuberay_missing(call)
        if status_details(exc).get("kind") == "namespaces":
            return BackendUnavailable(
                f"namespace {call.namespace!r} does not exist",
                detail="ask your admin to create it (see namespace_template in the raylab "
                "configuration)",
            )
        return NotFound(
            f"no {call.resource} named {call.name!r} in namespace {call.namespace!r}"
            if call.name
            else message
        )
    if status == HTTPStatus.CONFLICT:
        return Conflict(
            f"a cluster named {call.name!r} already exists in namespace {call.namespace!r}"
            if call.verb == "create"
            else f"{call.resource} {call.name!r} changed meanwhile: {message}",
            detail="choose another --name" if call.verb == "create" else "try again",
        )
    if status == HTTPStatus.UNPROCESSABLE_ENTITY:
        return Refused(
            f"Kubernetes refused the {call.resource} object: {message}",
            message,
            detail="check the GPU profiles and image in the raylab configuration",
        )
    if status == HTTPStatus.BAD_REQUEST:
        return Refused(f"Kubernetes refused to {call.verb} {call.resource}: {message}", message)
    if call.resource == "pods/log" and status >= 500:
        return BackendUnavailable(
            f"cannot read the log of head pod {call.name}: {message}",
            detail="the API server could not get it from the node's kubelet",
        )
    if status in (HTTPStatus.TOO_MANY_REQUESTS, HTTPStatus.GATEWAY_TIMEOUT) or status >= 500:
        return BackendUnavailable(
            f"Kubernetes at {call.server} could not {call.verb} {call.resource}: {message}",
            detail="the API server is busy or unwell; try again shortly",
        )
    return RaylabError(f"Kubernetes refused to {call.verb} {call.resource}: {message}")
