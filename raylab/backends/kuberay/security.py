"""The token Secret and NetworkPolicies of a KubeRay cluster, made around its RayCluster.

Order matters: the Secret and the policies exist before the RayCluster (so no Ray pod
ever starts without its token or unfenced), then become its dependents (ownerReferences),
so Kubernetes' garbage collector deletes them with it, and only then. A create that
fails half-way removes what it made.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ...auth import SECRET_KEY, TokenError, new_token
from ...config import Settings
from ...errors import BackendUnavailable, Conflict, Forbidden, NotFound
from ...identity import owner_label
from .config import SA_DIR, in_cluster
from .errors import Call, api_errors
from .manifest_security import (
    auth_env,
    network_policies,
    owner_reference,
    peer,
    secret_name,
    token_secret,
)

AUTH_ANNOTATION = "raylab.io/ray-auth"  # "token" on clusters whose Ray checks the Secret
REQUEST_TIMEOUT = (5.0, 30.0)
SECRETS, POLICIES = "secrets", "networkpolicies"  # as RBAC and error messages name them
_METHODS = {SECRETS: "namespaced_secret", POLICIES: "namespaced_network_policy"}
LEFTOVER_AGE_S = 120.0  # far longer than a create takes from its first object to its last
ADOPT_PATIENCE_S = 120.0  # how long a create waits out an API server outage to finish


@dataclass
class Prepared:
    """What `prepare` made, for `adopt` or `discard`."""

    cluster: str
    secret: str | None = None
    policies: list[str] = field(default_factory=list)
    ray_env: list[dict[str, Any]] = field(default_factory=list)

    def objects(self) -> list[tuple[str, str]]:
        secrets = [(SECRETS, self.secret)] if self.secret else []
        return secrets + [(POLICIES, p) for p in self.policies]


class ClusterSecurity:
    def __init__(
        self,
        api_client: Any,
        namespace: str,
        settings: Settings,
        call: Callable[[str, str, str | None], Call],
    ) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.networking = client.NetworkingV1Api(api_client)
        self.namespace = namespace
        self.settings = settings
        self._call = call

    def prepare(self, cluster: str, owner: str, labels: dict[str, str]) -> Prepared:
        """Make the Secret and the policies the configuration asks for (nothing owns them
        yet); returns the env that Ray containers need."""
        made = Prepared(cluster)
        try:
            if self.settings.token_auth:
                secret = token_secret(cluster, self.namespace, new_token(), labels)
                self._create(cluster, SECRETS, secret)
                made.secret = secret["metadata"]["name"]
                made.ray_env = auth_env(made.secret)
            if self.settings.options.network_policy:
                for policy in self._policies(cluster, owner, labels):
                    self._create(cluster, POLICIES, policy)
                    made.policies.append(policy["metadata"]["name"])
        except Exception:
            self.discard(made)
            raise
        return made

    def adopt(self, made: Prepared, raycluster: dict[str, Any]) -> None:
        """Make the RayCluster the owner of what `prepare` made.

        The cluster exists by now, so an API server that goes away meanwhile is waited
        for (up to ADOPT_PATIENCE_S): unowned, these objects would outlive the cluster.
        """
        patch = {"metadata": {"ownerReferences": [owner_reference(raycluster)]}}
        deadline = time.monotonic() + ADOPT_PATIENCE_S
        for resource, name in made.objects():
            while True:
                try:
                    with api_errors(self._call("patch", resource, name)):
                        self._api("patch", resource)(
                            name, self.namespace, patch, _request_timeout=REQUEST_TIMEOUT
                        )
                    break
                except (BackendUnavailable, Forbidden):
                    # Forbidden too: a restarting API server refuses until its RBAC is back.
                    if time.monotonic() >= deadline:
                        raise
                    time.sleep(1.0)

    def discard(self, made: Prepared) -> None:
        """Remove what a failed create made (best effort: the create's error matters more)."""
        for resource, name in made.objects():
            with contextlib.suppress(Exception):
                self._api("delete", resource)(
                    name, self.namespace, _request_timeout=REQUEST_TIMEOUT
                )

    def _api(self, verb: str, resource: str) -> Callable[..., Any]:
        api = self.core if resource == SECRETS else self.networking
        method: Callable[..., Any] = getattr(api, f"{verb}_{_METHODS[resource]}")
        return method

    def _create(self, cluster: str, resource: str, body: dict[str, Any]) -> None:
        """Create one object. One of the same name that nothing owns and that is older
        than any create takes is a leftover of a create that died half-way: replaced."""
        name, ns = body["metadata"]["name"], self.namespace
        call = self._call("create", resource, name)
        create = self._api("create", resource)
        try:
            with api_errors(call):
                create(ns, body, field_validation="Strict", _request_timeout=REQUEST_TIMEOUT)
            return
        except Conflict:
            with api_errors(self._call("get", resource, name)):
                meta = self._api("read", resource)(name, ns, _request_timeout=REQUEST_TIMEOUT)
                meta = meta.metadata
        created = meta.creation_timestamp
        age = (datetime.now(UTC) - created).total_seconds() if created else 0.0
        if meta.owner_references or age < LEFTOVER_AGE_S:
            raise Conflict(
                f"a cluster named {cluster!r} already exists in namespace {ns!r}",
                detail="choose another --name",
            ) from None
        with api_errors(self._call("delete", resource, name)):
            self._api("delete", resource)(name, ns, _request_timeout=REQUEST_TIMEOUT)
        with api_errors(call):
            create(ns, body, field_validation="Strict", _request_timeout=REQUEST_TIMEOUT)

    def read_token(self, cluster: str) -> str:
        name = secret_name(cluster)
        try:
            with api_errors(self._call("get", "secrets", name)):
                secret = self.core.read_namespaced_secret(
                    name, self.namespace, _request_timeout=REQUEST_TIMEOUT
                )
        except NotFound as exc:
            raise TokenError(
                f"the Secret {name!r} that holds the Ray token of cluster {cluster!r} "
                f"is missing from namespace {self.namespace!r}",
                detail="without it nobody can connect; delete the cluster and create it "
                "again (its pods read the token when they start)",
            ) from exc
        data = (secret.data or {}).get(SECRET_KEY)
        if not data:
            raise TokenError(
                f"the Secret {name!r} of cluster {cluster!r} has no {SECRET_KEY!r} key",
                detail="delete the cluster and create it again",
            )
        return base64.b64decode(data).decode()

    def _policies(self, cluster: str, owner: str, labels: dict[str, str]) -> list[dict[str, Any]]:
        o = self.settings.options
        pod_labels = {
            k: v.format(username=owner_label(owner)) for k, v in o.notebook_pod_labels.items()
        }
        notebooks = o.notebook_namespace or _own_namespace() or self.namespace
        clients = [peer(pod_labels, notebooks), *(dict(p) for p in o.network_policy_peers)]
        operator = peer(o.operator_pod_labels, o.operator_namespace or None)
        monitoring = peer({}, o.monitoring_namespace) if o.monitoring_namespace else None
        return network_policies(cluster, self.namespace, labels, clients, operator, monitoring)


def _own_namespace() -> str | None:
    """The namespace of this Jupyter server's pod (where the notebook pods run)."""
    if not in_cluster():
        return None
    try:
        return (SA_DIR / "namespace").read_text().strip() or None
    except OSError:
        return None
