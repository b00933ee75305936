"""The one error of onboarding: Kubernetes refused one of a user's objects.

JupyterHub shows a failed spawn's message to the user, so the message alone names the
object (kind, namespace/name) and what the API server said (the RBAC rule, the quota,
the admission policy): the admin can act on it at once, instead of the user meeting a
Forbidden on their first `up`.
"""

from __future__ import annotations

from ..errors import RaylabError

# What the API server says when a RoleBinding would grant rights its maker lacks.
_ESCALATION = "attempting to grant RBAC permissions not currently held"


class OnboardingRefused(RaylabError):
    """Kubernetes refused to apply one object; `kind`, `namespace`, `name`, `reason`."""

    status = 403
    code = "onboarding_refused"

    def __init__(
        self, username: str, kind: str, namespace: str | None, name: str, reason: str,
        detail: str | None = None,
    ) -> None:  # fmt: skip
        where = f"{namespace}/{name}" if namespace else name
        super().__init__(
            f"raylab could not onboard user {username!r}: Kubernetes refused {kind} "
            f"{where}: {reason}",
            detail=detail,
        )
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.reason = reason


def explain(kind: str, said: str, cluster_role: str) -> str:
    """The API server's words, made short where they are long: an escalation refusal
    lists every rule of the ClusterRole, when one missing verb is the cause."""
    if _ESCALATION in said:
        who = said.split(" is attempting", 1)[0].rsplit(": ", 1)[-1].split(" (groups=")[0]
        return (
            f"{who} may not bind ClusterRole {cluster_role}: it needs the rule "
            f"'bind' on clusterroles/{cluster_role} (rbac.authorization.k8s.io)"
        )
    return said


class ConfigMapUnreadable(OnboardingRefused):
    """The chart's settings ConfigMap, which a pod outside its namespace gets a copy of,
    could not be read: the spawn fails rather than start a pod without raylab's settings
    (its mount would never appear, and the pod would wait for it)."""

    def __init__(
        self, username: str, namespace: str, name: str, pod_namespace: str, reason: str,
        status: int | None = None,
    ) -> None:  # fmt: skip
        todo = _config_map_todo(status, namespace, name)
        # The message alone says what to do: JupyterHub shows only the message.
        RaylabError.__init__(
            self,
            f"raylab could not onboard user {username!r}: it could not read ConfigMap "
            f"{namespace}/{name}, the raylab settings to copy into namespace "
            f"{pod_namespace} for their pod: {reason}. {todo}",
            detail=todo,
        )
        self.kind = "ConfigMap"
        self.namespace = namespace
        self.name = name
        self.reason = reason


def _config_map_todo(status: int | None, namespace: str, name: str) -> str:
    if status == 404:
        return (
            f"Install the raylab Helm chart in namespace {namespace}, or set "
            "c.RaylabOnboarding.config_map and config_map_namespace to its ConfigMap."
        )
    if status == 403:
        return (
            "The hub's service account needs the Role <prefix>-onboarding of the raylab "
            f"Helm chart in namespace {namespace} (get on configmaps/{name})."
        )
    return "Check that the hub reaches the API server, then spawn again."
