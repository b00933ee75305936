"""`raylab culler`: watch clusters, sweep them on a timer, serve /metrics. Runs anywhere.

As a JupyterHub service (the hub starts it, as it does jupyterhub-idle-culler), as a
Deployment with its own service account (docs/culler.md), or in a shell. Independent of
any user's Jupyter server: a user whose server the hub stopped still has their idle
clusters suspended. Any number may run at once (they agree through conditional writes).
"""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import metrics
from ..backends import make_backend
from ..backends.base import Backend
from ..config import Settings
from ..errors import BackendUnavailable
from .mirror import ClusterMirror
from .per_namespace import CullerPerNamespace
from .sweep import Culler, SweepReport

Sweeper = Culler | CullerPerNamespace

SYNC_TIMEOUT_S = 120.0


def _backends(args: argparse.Namespace, settings: Settings) -> list[Backend]:
    name = getattr(args, "backend", None) or settings.backend
    namespaces = args.namespaces or []
    every = bool(getattr(args, "all_namespaces", False))
    if name != "kuberay" and (namespaces or every):
        raise BackendUnavailable("--namespace and --all-namespaces are for the KubeRay backend")
    if every and namespaces:
        raise BackendUnavailable(
            "--all-namespaces culls every namespace: leave out --namespace, or it"
        )
    if name != "kuberay" or not (namespaces or every):
        return [make_backend(name, settings)]
    from ..backends.kuberay.backend import KubeRayBackend
    from ..backends.kuberay.config import load_api_client, own_namespace
    from ..backends.kuberay.errors import ALL_NAMESPACES

    api, context_namespace = load_api_client()
    if every:
        # One watch of everything; its own namespace (never a user's) is only nominal.
        return [KubeRayBackend(settings, api_client=api, namespace=own_namespace(context_namespace),
                               watch_namespaces=[ALL_NAMESPACES])]  # fmt: skip
    return [KubeRayBackend(settings, api_client=api, namespace=ns) for ns in namespaces]


def _culler(backend: Backend, settings: Settings, every: bool) -> Sweeper:
    if not every:
        return Culler(backend, settings)
    from ..backends.kuberay.backend import KubeRayBackend

    assert isinstance(backend, KubeRayBackend)  # as _backends made it
    api = backend.api
    return CullerPerNamespace(
        lambda ns: Culler(KubeRayBackend(settings, api_client=api, namespace=ns), settings)
    )


def describe(report: SweepReport) -> str:
    parts = [
        f"{report.clusters} clusters",
        f"{report.read} read ({report.active} active, {report.idle} idle, "
        f"{report.unknown} unknown)",
    ]
    if report.warned:
        parts.append(f"warned {', '.join(report.warned)}")
    if report.suspended:
        parts.append(f"suspended {', '.join(report.suspended)}")
    if report.conflicts:
        parts.append(f"{report.conflicts} changed meanwhile")
    return "sweep: " + "; ".join(parts) + f" in {report.seconds:.2f} s"


def run_culler(args: argparse.Namespace, settings: Settings, say: Callable[[str], None]) -> None:
    interval = args.interval or settings.options.cull_interval_seconds
    every = bool(getattr(args, "all_namespaces", False))
    backends = _backends(args, settings)
    mirrors = [ClusterMirror(b) for b in backends]
    cullers = [_culler(b, settings, every) for b in backends]
    metrics.set_cluster_source(
        "culler",
        lambda: [
            c
            for m, culler in zip(mirrors, cullers, strict=True)
            for c in culler.with_gpu_use(m.clusters())
        ],
    )
    if args.metrics_port is not None:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port, addr=args.metrics_host)
        say(f"raylab culler: /metrics on {args.metrics_host}:{args.metrics_port}")
    stop = threading.Event()
    _on_signals(stop)
    for mirror in mirrors:
        mirror.start()
    try:
        deadline = time.monotonic() + SYNC_TIMEOUT_S
        for mirror in mirrors:
            while not mirror.synced.wait(0.5):
                if stop.is_set():
                    return
                if time.monotonic() > deadline:
                    raise BackendUnavailable(
                        f"raylab culler: cannot list clusters: {mirror.error or 'no answer'}",
                        detail="check the culler's credentials (docs/culler.md)",
                    )
        where = (
            "every namespace"
            if every
            else ", ".join(getattr(b, "namespace", None) or b.name for b in backends)
        )
        say(f"raylab culler: watching {where}; a sweep every {interval:g} s")
        while not stop.is_set():
            for mirror, culler in zip(mirrors, cullers, strict=True):
                say(describe(culler.sweep(mirror.clusters())))
            if args.once:
                break
            stop.wait(interval)
    finally:
        for culler in cullers:
            culler.close()
        for mirror in mirrors:
            mirror.stop()
        metrics.set_cluster_source("culler", None)


def _on_signals(stop: threading.Event) -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
