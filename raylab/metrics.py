"""Prometheus metrics, registered once in prometheus_client's default registry.

The Jupyter server serves that registry on its own `/metrics` (jupyter_server does, no
wiring needed) and `raylab culler` serves it on its port, so both show the same names.
Gauges about clusters are computed when scraped, from whatever holds the clusters in
this process (the server's watch cache or the culler's): `set_cluster_source`.

Counters count what this process did: with two cullers running, sum them for the total
of suspensions, but take the max of `raylab_gpu_seconds_total` per user (each culler
meters every cluster it sees; the ledger itself never double-counts).
"""

from __future__ import annotations

import threading
import time
from collections import Counter as Tally
from collections.abc import Callable, Iterable, Iterator

from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .model import ClusterInfo, Phase

GPU_SECONDS = Counter(
    "raylab_gpu_seconds",
    "GPU-seconds used: GPUs requested times seconds running, as this process metered them.",
    ["user", "gpu_type"],
)
USED_GPU_SECONDS = Counter(
    "raylab_used_gpu_seconds",
    "GPU-seconds busy: the GPUs' utilization as Ray's reporter read it, integrated over "
    "time, as this process metered it (beside raylab_gpu_seconds, which counts held GPUs).",
    ["user", "gpu_type"],
)
IDLE_SUSPENSIONS = Counter(
    "raylab_idle_suspensions", "Clusters suspended for being idle.", ["gpu_type"]
)
IDLE_WARNINGS = Counter(
    "raylab_idle_warnings", "Warnings that an idle cluster is about to be suspended.", ["gpu_type"]
)
KEEP_RUNNING = Counter(
    "raylab_keep_running", "Keep running requests (idle clock reset by the owner)."
)
WATCH_EVENTS = Counter(
    "raylab_watch_events", "Cluster changes received from the backend's watch.", ["type"]
)
API_ERRORS = Counter(
    "raylab_api_errors",
    "Errors answered by the REST API or met by the culler, by HTTP status.",
    ["source", "status"],
)
DASHBOARD_REQUESTS = Counter(
    "raylab_dashboard_requests",
    "Requests to clusters' dashboards made to read their activity.",
    ["outcome"],
)
UPDATE_CONFLICTS = Counter(
    "raylab_idle_update_conflicts",
    "Idle-state writes refused because another culler or the owner changed it first.",
)
SWEEP_SECONDS = Histogram(
    "raylab_culler_sweep_seconds",
    "How long one culler sweep over every cluster took.",
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
)

ClusterSource = Callable[[], Iterable[ClusterInfo]]
_sources: dict[str, ClusterSource] = {}
_lock = threading.Lock()


def set_cluster_source(key: str, source: ClusterSource | None) -> None:
    """Let the gauges read this process's clusters from `source` (None: forget it).

    Keyed, so that a server and a culler in one process (tests) each count theirs once."""
    with _lock:
        if source is None:
            _sources.pop(key, None)
        else:
            _sources[key] = source


def _clusters() -> list[ClusterInfo]:
    with _lock:
        sources = list(_sources.values())
    seen: dict[tuple[str | None, str], ClusterInfo] = {}
    for source in sources:
        for info in source():
            seen[(info.namespace, info.name)] = info
    return list(seen.values())


class _ClusterGauges(Collector):
    def collect(self) -> Iterator[Metric]:
        clusters = _clusters()
        now = time.time()
        by_phase = GaugeMetricFamily(
            "raylab_clusters", "Clusters by phase and GPU type.", labels=["phase", "gpu_type"]
        )
        phases = Tally((str(c.phase), c.spec.gpu_type) for c in clusters)
        for phase in Phase:
            for gpu_type in sorted({c.spec.gpu_type for c in clusters}):
                by_phase.add_metric([str(phase), gpu_type], phases[(str(phase), gpu_type)])
        yield by_phase
        requested = GaugeMetricFamily(
            "raylab_gpus_requested",
            "GPUs requested by clusters that are not suspended, by owner and GPU type.",
            labels=["user", "gpu_type"],
        )
        gpus: Tally[tuple[str, str]] = Tally()
        for c in clusters:
            if c.spec.gpus and c.phase not in (Phase.SUSPENDED, Phase.DELETING):
                gpus[(c.owner, c.spec.gpu_type)] += c.spec.gpus
        for (user, gpu_type), count in sorted(gpus.items()):
            requested.add_metric([user, gpu_type], count)
        yield requested
        idle = GaugeMetricFamily(
            "raylab_idle_clusters",
            "Running clusters the culler has seen idle, by GPU type.",
            labels=["gpu_type"],
        )
        idle_seconds = GaugeMetricFamily(
            "raylab_cluster_idle_seconds",
            "How long each idle cluster has been idle.",
            labels=["cluster", "user", "gpu_type"],
        )
        unknown = GaugeMetricFamily(
            "raylab_activity_unknown_clusters",
            "Running clusters whose activity could not be read, by GPU type.",
            labels=["gpu_type"],
        )
        idle_count: Tally[str] = Tally()
        unknown_count: Tally[str] = Tally()
        for c in clusters:
            if c.phase == Phase.SUSPENDED:
                continue
            if c.idle.since is not None:
                idle_count[c.spec.gpu_type] += 1
                idle_seconds.add_metric(
                    [c.name, c.owner, c.spec.gpu_type], max(0.0, now - c.idle.since)
                )
            if c.idle.unknown_since is not None:
                unknown_count[c.spec.gpu_type] += 1
        for gpu_type in sorted({c.spec.gpu_type for c in clusters}):
            idle.add_metric([gpu_type], idle_count[gpu_type])
            unknown.add_metric([gpu_type], unknown_count[gpu_type])
        yield idle
        yield idle_seconds
        yield unknown
        yield from _gpu_use_gauges(clusters)


def _gpu_use_gauges(clusters: list[ClusterInfo]) -> Iterator[Metric]:
    """GPU use as last read (clusters whose use was not measured are left out, never 0)."""
    utilization = GaugeMetricFamily(
        "raylab_gpu_utilization_percent",
        "Mean utilization of each running cluster's GPUs, as Ray's reporter read it.",
        labels=["cluster", "user", "gpu_type"],
    )
    busy = GaugeMetricFamily(
        "raylab_gpus_busy",
        "GPUs at or above the busy threshold (c.Raylab.gpu_busy_percent), by owner.",
        labels=["user", "gpu_type"],
    )
    busy_count: Tally[tuple[str, str]] = Tally()
    for c in clusters:
        use = c.gpu_use
        if use is None or not use.measured or c.phase in (Phase.SUSPENDED, Phase.DELETING):
            continue
        utilization.add_metric([c.name, c.owner, c.spec.gpu_type], use.utilization)
        busy_count[(c.owner, c.spec.gpu_type)] += use.busy
    for (user, gpu_type), count in sorted(busy_count.items()):
        busy.add_metric([user, gpu_type], count)
    yield utilization
    yield busy


REGISTRY.register(_ClusterGauges())
