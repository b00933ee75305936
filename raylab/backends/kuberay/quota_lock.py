"""One quota check and create (or scale) at a time per user, across processes and machines.

The Jupyter server, CLIs and kernels of one user may each create at the same moment,
from different machines: the only place they all share is the API server. So the lock
is a coordination.k8s.io/v1 Lease per user in the clusters' namespace, used as
client-go's leader election uses one: taken by create (409: someone holds it), renewed
while held, released by a delete that holds only if nobody took it over meanwhile.

A holder that died (a killed kernel) leaves its Lease behind: it is taken over once it
has gone unrenewed for its leaseDurationSeconds, as timed by the waiter's own clock
(the holder's renewTime comes from another machine's clock, which may be off).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import socket
import threading
import time
import uuid
from datetime import UTC, datetime
from http import HTTPStatus
from types import TracebackType
from typing import Any

from ...errors import BackendUnavailable, Conflict, Forbidden, NotFound, RaylabError
from ...identity import owner_label
from .errors import RBAC_DOC, Call, api_errors, server_message
from .manifest import MANAGED_BY, MANAGED_BY_LABEL, OWNER_ANNOTATION, OWNER_LABEL

LEASES = "leases"  # as RBAC and error messages name them
REQUEST_TIMEOUT = (5.0, 30.0)
# The rule an admin adds to the Role when it lacks it (docs/kubernetes-rbac.md).
RULE = (
    'apiGroups: ["coordination.k8s.io"], resources: ["leases"], '
    'verbs: ["get", "create", "update", "delete"]'
)
log = logging.getLogger("raylab.kuberay")


def lease_name(owner: str) -> str:
    """A valid object name for any username (a hash: "Alice@Example.com" too)."""
    return "raylab-quota-" + hashlib.sha256(owner.encode()).hexdigest()[:20]


class QuotaLease:
    """A context manager holding `owner`'s Lease in `namespace` while inside.

    `duration_s`: how long the Lease outlives a holder that stops renewing it (it renews
    every third of that); `wait_s`: how long to wait for it before BackendUnavailable.
    """

    def __init__(
        self,
        api_client: Any,
        namespace: str,
        owner: str,
        server: str,
        *,
        duration_s: int = 15,
        wait_s: float = 60.0,
    ) -> None:
        from kubernetes import client

        self.api = client.CoordinationV1Api(api_client)
        self.namespace = namespace
        self.owner = owner
        self.server = server
        self.name = lease_name(owner)
        self.duration_s = max(1, int(duration_s))
        self.wait_s = wait_s
        self.holder = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self._version = ""  # resourceVersion of the Lease as this holder last wrote it
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None

    # --- context manager -----------------------------------------------------------

    def __enter__(self) -> None:
        self._acquire()
        self._stop.clear()
        self._renewer = threading.Thread(target=self._renew, name="raylab-quota-lease",
                                         daemon=True)  # fmt: skip
        self._renewer.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=REQUEST_TIMEOUT[1])
        try:
            # Only this holder's Lease: one taken over meanwhile is left to its holder.
            with self._lock:
                options = {"preconditions": {"resourceVersion": self._version}}
            self._request("delete", self.api.delete_namespaced_lease, self.name,
                          self.namespace, body=options)  # fmt: skip
        except (NotFound, Conflict):
            pass
        except RaylabError as error:
            # Not the caller's failure (its create or scale is done): the Lease expires.
            log.warning("could not release %s's quota lease: %s", self.owner, error.message)

    # --- steps ---------------------------------------------------------------------

    def _acquire(self) -> None:
        deadline = time.monotonic() + self.wait_s
        # The Lease as first seen here and when: unchanged for its duration, it is dead.
        seen: tuple[str, float] | None = None
        holder = ""
        delay = 0.05
        while True:
            try:
                self._write("create", self._body())
                return
            except Conflict:
                pass
            current = self._read()
            if current is not None:
                meta, spec = current.get("metadata") or {}, current.get("spec") or {}
                version = str(meta.get("resourceVersion") or "")
                holder = str(spec.get("holderIdentity") or "")
                if seen is None or seen[0] != version:
                    seen = (version, time.monotonic())
                lasts = int(spec.get("leaseDurationSeconds") or self.duration_s)
                if time.monotonic() - seen[1] >= lasts:
                    try:
                        # Only if still the dead holder's: of several waiters, one wins.
                        self._write("update", self._body(version))
                        log.info("took over %s's quota lease from %s", self.owner, holder)
                        return
                    except (Conflict, NotFound):
                        seen = None
                        continue
            left = deadline - time.monotonic()
            if left <= 0:
                raise BackendUnavailable(
                    f"another raylab request of {self.owner}'s is checking quotas and "
                    f"creating or scaling a cluster, and still held Lease "
                    f"{self.namespace}/{self.name} after {self.wait_s:.0f} s"
                    + (f" (holder {holder})" if holder else ""),
                    detail="try again in a moment; a holder that died lets go after "
                    f"{self.duration_s} s",
                )
            time.sleep(min(left, delay * random.uniform(0.5, 1.5)))  # jitter: waiters spread out
            delay = min(delay * 1.5, 0.5)

    def _renew(self) -> None:
        """Keep the Lease fresh while held, so no waiter takes it from a live holder."""
        while not self._stop.wait(self.duration_s / 3):
            with self._lock:
                version = self._version
            try:
                self._write("update", self._body(version))
            except (Conflict, NotFound):
                log.warning("lost %s's quota lease to another holder", self.owner)
                return
            except RaylabError as error:  # tried again at the next beat
                log.warning("could not renew %s's quota lease: %s", self.owner, error.message)

    # --- requests ------------------------------------------------------------------

    def _body(self, version: str | None = None) -> dict[str, Any]:
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        metadata: dict[str, Any] = {
            "name": self.name,
            "labels": {MANAGED_BY_LABEL: MANAGED_BY, OWNER_LABEL: owner_label(self.owner)},
            "annotations": {OWNER_ANNOTATION: self.owner},
        }
        if version:
            metadata["resourceVersion"] = version  # the write fails (409) if it changed
        spec = {
            "holderIdentity": self.holder,
            "leaseDurationSeconds": self.duration_s,
            "acquireTime": now,
            "renewTime": now,
        }
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": metadata, "spec": spec}  # fmt: skip

    def _write(self, verb: str, body: dict[str, Any]) -> None:
        if verb == "create":
            written = self._request(verb, self.api.create_namespaced_lease, self.namespace, body)
        else:
            written = self._request(verb, self.api.replace_namespaced_lease, self.name,
                                    self.namespace, body)  # fmt: skip
        with self._lock:
            self._version = str(written["metadata"]["resourceVersion"])

    def _read(self) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self._request("get", self.api.read_namespaced_lease,
                                                  self.name, self.namespace)  # fmt: skip
        except NotFound:
            return None  # released just now: try again at once
        return found

    def _request(self, verb: str, method: Any, *args: Any, **kwargs: Any) -> Any:
        call = Call(verb, LEASES, self.namespace, self.server, self.name)
        try:
            with api_errors(call):
                response = method(*args, _preload_content=False,
                                  _request_timeout=REQUEST_TIMEOUT, **kwargs)  # fmt: skip
        except Forbidden as error:
            if getattr(error.__cause__, "status", None) != HTTPStatus.FORBIDDEN:
                raise  # credentials not accepted (401): its own message
            raise Forbidden(
                error.message,
                detail="raylab holds a Lease per user while it checks quotas and creates "
                "or scales a cluster, so that two requests at once cannot both pass; ask "
                f"your admin to add this rule to the Role of {RBAC_DOC}: {RULE} (the API "
                f"server said: {server_message(error.__cause__)})",
            ) from error.__cause__
        return json.loads(response.data)
