"""Does a cluster's Serve app answer requests? Serve's own counter, from the head's metrics.

Serve's actors show no tasks in Ray's state API (it turns their task events off), so a
replica that waits for requests looks like nothing, and one that answers them looks the
same. Serve's proxy counts each HTTP request it handles (`ray_serve_num_http_requests`,
per application) and Ray's metrics agent serves the count on the node's metrics port.
raylab starts Serve with its one proxy on the head (serving/defaults.py), so the head's
metrics hold every request that came in over HTTP. The count is compared with the last
sweep's: more requests means an app answered since then. The first reading of a
cluster is only a baseline: a count since an unknown time says nothing of now.
"""

from __future__ import annotations

import math
import threading
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

REQUESTS = "ray_serve_num_http_requests"  # a counter: its samples end in _total
MAX_BYTES = 8 * 1024 * 1024  # a head's metrics are tens of KiB; past this, not believed


class ServeRequests:
    """Per cluster (by uid), the last count of HTTP requests its Serve proxy answered."""

    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._last: dict[str, dict[str, float]] = {}
        self._lock = threading.Lock()
        self.reads = 0

    def answered(self, key: str, metrics_url: str) -> str:
        """Which apps answered requests since the last reading ('' none, or unreadable)."""
        counts = self.read(metrics_url)
        if counts is None:
            return ""
        with self._lock:
            before = self._last.get(key)
            self._last[key] = counts
        if before is None:
            return ""
        grew = [(app, n - before.get(app, 0.0)) for app, n in sorted(counts.items())]
        grew = [(app, n) for app, n in grew if n > 0]
        if not grew:
            return ""
        return ", ".join(f"{app} ({n:.0f} request{'s' if n != 1 else ''})" for app, n in grew)

    def read(self, metrics_url: str) -> dict[str, float] | None:
        """Requests per application, as the head's metrics count them; None: unreadable."""
        with self._lock:
            self.reads += 1
        try:
            url = metrics_url.rstrip("/") + "/metrics"
            with urllib.request.urlopen(url, timeout=self.timeout) as response:
                text = response.read(MAX_BYTES + 1)
        except (TimeoutError, urllib.error.URLError, OSError):
            return None
        if len(text) > MAX_BYTES:
            return None
        counts: dict[str, float] = {}
        try:
            for family in text_string_to_metric_families(text.decode("utf-8", "replace")):
                if family.name != REQUESTS:
                    continue
                for sample in family.samples:
                    if sample.name == REQUESTS + "_total" and _count(sample.value):
                        app = sample.labels.get("application") or "?"
                        counts[app] = counts.get(app, 0.0) + sample.value
        except ValueError:
            return None
        return counts

    def forget(self, key: str) -> None:
        with self._lock:
            self._last.pop(key, None)


def _count(value: float) -> bool:
    return math.isfinite(value) and value >= 0
