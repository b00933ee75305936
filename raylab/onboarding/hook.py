"""Onboarding wired to JupyterHub: KubeSpawner's `pre_spawn_hook`.

Why a pre_spawn_hook and not a hub service with its own ClusterRole: onboarding must be
done *before* the user's pod starts (the pod runs as the user's service account, which
must exist, and the server's first `up` needs the RoleBinding), and the hook is the one
place JupyterHub waits on before it creates the pod. A refusal then fails that spawn
with its message on the user's spawn page, and a user the admin forgot cannot exist.
A service would race the spawn (it hears of a user when asked, or by polling the hub's
API) and would need a hub API token, a Deployment and a Service of its own; the hook
runs in the hub pod with the hub's service account, and the chart gives that account
the least rights onboarding needs (ClusterRole <prefix>-onboarding, `onboarding.*`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

from .apply import Onboarded, onboard
from .settings import load


class SpawnOnboarding:
    """`c.KubeSpawner.pre_spawn_hook = raylab.onboarding.pre_spawn_hook`.

    Onboards `spawner.user.name`, then points the spawner at what was made: its
    `service_account`, and with `enable_user_namespaces` its `namespace` (the pod then
    runs in the user's Ray namespace, beside their clusters, with a copy of the chart's
    settings ConfigMap there to mount). Settings are read at each spawn, so a changed
    ConfigMap applies without restarting the hub.
    """

    def __init__(self, api: Any = None) -> None:
        self._api = api
        self._context_namespace: str | None = None
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> SpawnOnboarding:
        # traitlets deep-copies config values into each spawner it makes: they all share
        # this hook and its API client (a lock and a connection pool cannot be copied).
        return self

    def api(self) -> Any:
        """The hub's own credentials: its pod's service account (or KUBECONFIG)."""
        with self._lock:
            if self._api is None:
                from ..backends.kuberay.config import load_api_client

                self._api, self._context_namespace = load_api_client()
            return self._api

    def hub_namespace(self) -> str:
        """The hub's own namespace, where the chart's ConfigMap is unless
        c.RaylabOnboarding.config_map_namespace says: its pod's, else its kubeconfig
        context's, else kubectl's default."""
        from ..backends.kuberay.config import own_namespace

        return own_namespace(self._context_namespace)

    async def __call__(self, spawner: Any) -> Onboarded:
        settings, onboarding = load(getattr(spawner, "config", None))
        user_namespaces = bool(getattr(spawner, "enable_user_namespaces", False))
        # The pod's namespace holds its service account: the hub's (KubeSpawner's
        # `namespace`), or the user's Ray namespace with enable_user_namespaces.
        account_namespace = None if user_namespaces else getattr(spawner, "namespace", None)
        # The API calls block: off the hub's event loop.
        api = self.api()
        done = await asyncio.to_thread(
            onboard, api, spawner.user.name, settings, onboarding, account_namespace,
            hub_namespace=self.hub_namespace(),
        )  # fmt: skip
        if user_namespaces:
            spawner.namespace = done.namespace
        spawner.service_account = done.service_account
        return done


pre_spawn_hook = SpawnOnboarding()
