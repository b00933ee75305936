"""Where the GPU-hours ledger lives: beside the clusters, so it outlives every process.

- local backend: `<state folder>/usage/<user>.jsonl`, one interval per line, rewritten
  whole under the state folder's lock (a few hundred lines for 90 days of use);
- KubeRay: a ConfigMap `raylab-usage-<user>` in the clusters' namespace, key
  `intervals.jsonl`, replaced with its resourceVersion (a concurrent writer makes the
  API server answer 409: read, merge, try again). A ConfigMap per user rather than per
  namespace keeps each far below the 1 MiB object limit, and with one namespace per
  user it sits beside that user's clusters, under the same RBAC. Annotations on the
  RayCluster would vanish with it; the ledger must outlive deletions.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from filelock import FileLock

from ..backends.base import Backend
from ..backends.kuberay.manifest import (
    MANAGED_BY,
    MANAGED_BY_LABEL,
    OWNER_ANNOTATION,
    OWNER_LABEL,
)
from ..errors import RaylabError
from ..identity import owner_label
from .ledger import Interval, LedgerStore, merge, owned

REQUEST_TIMEOUT = (5.0, 30.0)
DATA_KEY = "intervals.jsonl"
USAGE_LABEL = "raylab.io/usage"
NAME_PREFIX = "raylab-usage-"  # then the user's owner_label


def _lines(intervals: list[Interval]) -> str:
    return "".join(json.dumps(i.to_json(), sort_keys=True) + "\n" for i in intervals)


def _parse(text: str) -> list[Interval]:
    out = []
    for line in text.splitlines():
        with contextlib.suppress(ValueError, KeyError, TypeError):
            out.append(Interval.from_json(json.loads(line)))
    return out


class LocalLedger:
    def __init__(self, state_dir: Path) -> None:
        self.folder = Path(state_dir) / "usage"

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.folder.mkdir(parents=True, exist_ok=True)
        with FileLock(self.folder / ".lock"):
            yield

    def _path(self, owner: str) -> Path:
        return self.folder / f"{owner_label(owner)}.jsonl"

    def load(self, owner: str | None, clusters: Mapping[str, str]) -> list[Interval]:
        if owner is not None:
            paths = [self._path(owner)]
        else:
            paths = sorted(self.folder.glob("*.jsonl")) if self.folder.is_dir() else []
        out: list[Interval] = []
        for path in paths:
            with contextlib.suppress(OSError):
                # The file is named for its user (_path): it vouches for no one else.
                out.extend(owned(path.stem, _parse(path.read_text()), clusters))
        return out

    def save(self, owner: str, intervals: list[Interval], keep_after: float) -> None:
        with self._lock():
            path = self._path(owner)
            stored = _parse(path.read_text()) if path.is_file() else []
            kept = [i for i in merge([*stored, *intervals]) if i.end >= keep_after]
            tmp = path.with_suffix(".tmp")
            tmp.write_text(_lines(kept))
            tmp.replace(path)


class KubeRayLedger:
    def __init__(self, backend: Any, tries: int = 5) -> None:
        from kubernetes import client

        self.backend = backend
        self.core = client.CoreV1Api(backend.api)
        self.namespace: str = backend.namespace
        self.tries = tries

    def _name(self, owner: str) -> str:
        return f"{NAME_PREFIX}{owner_label(owner)}"

    def load(self, owner: str | None, clusters: Mapping[str, str]) -> list[Interval]:
        from ..backends.kuberay.errors import ALL_NAMESPACES, api_errors

        if owner is not None:
            body = self._read(owner)
            stored = _parse(((body or {}).get("data") or {}).get(DATA_KEY, ""))
            return owned(owner_label(owner), stored, clusters)
        # Everyone's ledgers (an admin's --all): in each namespace the backend lists
        # clusters from, so an admin overview across namespaces counts every user.
        selector = f"{MANAGED_BY_LABEL}={MANAGED_BY},{USAGE_LABEL}=true"
        items: list[dict[str, Any]] = []
        for scope in self.backend.scopes:
            if scope is None:
                call = self.backend._call("list", "configmaps", namespace=ALL_NAMESPACES)
                listing: tuple[Any, ...] = (self.core.list_config_map_for_all_namespaces,)
            else:
                call = self.backend._call("list", "configmaps", namespace=scope)
                listing = (self.core.list_namespaced_config_map, scope)
            with api_errors(call):
                items += self.backend._json(*listing, label_selector=selector)["items"]
        out: list[Interval] = []
        for item in items:
            # Named for its user (_name): it vouches for no one else. Labels and
            # annotations are whatever its writer set; the name is the one we read.
            name = str((item.get("metadata") or {}).get("name", ""))
            if name.startswith(NAME_PREFIX):
                stored = _parse((item.get("data") or {}).get(DATA_KEY, ""))
                out.extend(owned(name.removeprefix(NAME_PREFIX), stored, clusters))
        return out

    def _read(self, owner: str) -> dict[str, Any] | None:
        """The owner's ledger, None where there is none yet. Any other refusal (a Role
        without configmaps) is one message naming it, as every other call's."""
        from kubernetes.client.exceptions import ApiException

        from ..backends.kuberay.errors import translate

        try:
            body: dict[str, Any] = self.backend._json(
                self.core.read_namespaced_config_map, self._name(owner), self.namespace
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            call = self.backend._call("get", "configmaps", self._name(owner))
            raise (translate(exc, call) or exc) from exc
        return body

    def save(self, owner: str, intervals: list[Interval], keep_after: float) -> None:
        from kubernetes.client.exceptions import ApiException

        from ..backends.kuberay.errors import translate

        name = self._name(owner)
        call = self.backend._call("update", "configmaps", name)
        for _ in range(self.tries):
            try:
                current = self._read(owner)
                stored = _parse(((current or {}).get("data") or {}).get(DATA_KEY, ""))
                kept = [i for i in merge([*stored, *intervals]) if i.end >= keep_after]
                body: dict[str, Any] = {
                    "metadata": {
                        "name": name,
                        "labels": {
                            MANAGED_BY_LABEL: MANAGED_BY,
                            OWNER_LABEL: owner_label(owner),
                            USAGE_LABEL: "true",
                        },
                        "annotations": {OWNER_ANNOTATION: owner},
                    },
                    "data": {DATA_KEY: _lines(kept)},
                }
                create: Callable[..., Any] = self.core.create_namespaced_config_map
                replace: Callable[..., Any] = self.core.replace_namespaced_config_map
                if current is None:
                    create(self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
                else:
                    # The precondition: 409 if anyone wrote it after our read.
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    replace(name, self.namespace, body, _request_timeout=REQUEST_TIMEOUT)
                return
            except ApiException as exc:
                if exc.status == 409:
                    continue  # written meanwhile by another culler: merge with theirs
                error = translate(exc, call)
                if error is None:
                    raise
                raise error from exc
        raise RaylabError(
            f"could not record GPU-hours in ConfigMap {name}: {self.tries} concurrent writes",
            detail="it is tried again at the next flush",
        )


def store_for(backend: Backend) -> LedgerStore:
    """The ledger beside `backend`'s clusters."""
    if backend.state_dir is None:  # its clusters live in Kubernetes: ConfigMaps beside them
        return KubeRayLedger(backend)
    return LocalLedger(backend.state_dir)
