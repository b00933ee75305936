"""Where the KubeRay backend's credentials and namespace come from.

In a pod: the pod's service account and namespace. Elsewhere: KUBECONFIG (or
~/.kube/config) and its context's namespace. `c.Raylab.namespace_template` (one namespace
per user) comes before both.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...config import Settings
from ...errors import BackendUnavailable
from ...identity import owner_label

SA_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


def in_cluster() -> bool:
    """Running in a pod: the API server's Service is in the environment."""
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def load_api_client() -> tuple[Any, str | None]:
    """An ApiClient from the pod's service account, else from KUBECONFIG (or
    ~/.kube/config); with the kubeconfig context's namespace, if it names one."""
    from kubernetes import client, config
    from kubernetes.config.config_exception import ConfigException

    if in_cluster() and (SA_DIR / "token").is_file():
        configuration = client.Configuration()
        load_incluster: Callable[..., None] = config.load_incluster_config
        load_incluster(client_configuration=configuration)
        return _client(configuration), None
    # Read KUBECONFIG now: the client reads it once, at its own import.
    path = os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        load: Callable[..., None] = config.load_kube_config
        contexts: Callable[..., Any] = config.list_kube_config_contexts
        configuration = client.Configuration()
        load(config_file=path, client_configuration=configuration, persist_config=False)
        _, active = contexts(config_file=path)
    except (ConfigException, OSError, TypeError, ValueError) as exc:
        raise BackendUnavailable(
            f"no Kubernetes configuration: not in a pod, and no usable kubeconfig at {path} "
            f"({exc})",
            detail="set KUBECONFIG, or use --backend local",
        ) from exc
    namespace = ((active or {}).get("context") or {}).get("namespace")
    return _client(configuration), str(namespace) if namespace else None


def _client(configuration: Any) -> Any:
    """An ApiClient that fails at once when the API server is away.

    urllib3 would retry a refused connection three times, logging a warning each time,
    which a notebook shows in red; the caller gets one clear error instead, and watches
    retry with their own backoff. Dropped keep-alive connections are still detected
    before reuse.
    """
    from kubernetes import client

    configuration.retries = 0
    return client.ApiClient(configuration)


def resolve_namespace(settings: Settings, user: str | None, context_namespace: str | None) -> str:
    """The template (one namespace per user), else this pod's, else the kubeconfig's."""
    template = settings.options.namespace_template
    if template:
        from ...identity import current_user

        try:
            return str(template.format(username=owner_label(user or current_user())))
        except (KeyError, IndexError, ValueError) as exc:
            raise BackendUnavailable(
                f"namespace_template {template!r} is not valid ({exc!r})",
                detail="the only placeholder is {username}, e.g. 'ray-{username}'",
            ) from exc
    return own_namespace(context_namespace)


def own_namespace(context_namespace: str | None) -> str:
    """This pod's namespace, else the kubeconfig context's, else kubectl's default."""
    try:
        own = (SA_DIR / "namespace").read_text().strip()
    except OSError:
        own = ""
    return own or context_namespace or "default"
