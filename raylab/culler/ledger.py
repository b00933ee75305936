"""GPU-hours: GPUs requested × time running, per cluster and per user, as OpenCost counts.

A cluster is billed while it holds its GPU requests: Starting, Ready or Degraded (not
Pending, whose pods wait for nodes; not Suspended, Failed or Deleting). A culler meters
what it sees at each sweep into intervals `[start, end]` per cluster uid and writes them
to a ledger per user every `usage_flush_seconds` (ledger_store.py). Intervals of one
cluster with the same GPU count are merged by union, so any number of cullers metering
the same cluster, or one culler writing the same interval again, count it once.

A culler that restarts (or a Jupyter server) continues a cluster's last interval when it
ended less than `max_gap_s` ago and the cluster still runs with the same GPUs; longer
stretches nobody watched are not counted (the README says so).

Beside what was held, each interval keeps what was used: `used`, the busy GPU-seconds (the
GPUs' utilization integrated over the sweeps that read it, gpu_use.py), and `measured`,
the held GPU-seconds during which use could be read. Records from before GPU use was read
have neither and say "not measured"; `used` is never more than `measured`.

A user can write to their own ledger, so a ledger counts only its user's clusters: an
interval naming another owner, or of a cluster that exists and says it is someone
else's, is ignored (`owned`); and one user's intervals never merge with another's.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Protocol

from ..identity import owner_label
from ..model import ClusterInfo, GpuUse, Phase, UsageRow

log = logging.getLogger("raylab.culler")
BILLED = frozenset({Phase.STARTING, Phase.READY, Phase.DEGRADED})


@dataclass(frozen=True)
class Interval:
    uid: str
    cluster: str
    owner: str
    gpu_type: str
    gpus: int
    start: float
    end: float
    used: float = 0.0  # busy GPU-seconds
    measured: float = 0.0  # held GPU-seconds during which use was read

    @property
    def gpu_seconds(self) -> float:
        return self.gpus * max(0.0, self.end - self.start)

    def between(self, since: float, until: float) -> float:
        """GPU-seconds of this interval that fall within [since, until]."""
        return self.gpus * max(0.0, min(self.end, until) - max(self.start, since))

    def share(self, since: float, until: float) -> float:
        """The part of this interval within [since, until] (used and measured are
        taken as spread evenly over it)."""
        length = self.end - self.start
        if length <= 0:
            return 0.0
        return max(0.0, min(self.end, until) - max(self.start, since)) / length

    def to_json(self) -> dict[str, Any]:
        # Unrounded: the same stretch written again by a later flush must read back with
        # the same start, and its use within what it held (JSON floats round-trip).
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Interval:
        return cls(
            uid=str(data["uid"]),
            cluster=str(data["cluster"]),
            owner=str(data["owner"]),
            gpu_type=str(data["gpu_type"]),
            gpus=int(data["gpus"]),
            start=float(data["start"]),
            end=float(data["end"]),
        )._with_use(data.get("used"), data.get("measured"))

    def _with_use(self, used: object, measured: object) -> Interval:
        """Use as stored, if it can be true; else not measured (a ledger is the user's
        own file: a forged figure is dropped, never counted)."""
        u, m = _figure(used), _figure(measured)
        slack = 1e-6 * max(1.0, self.gpu_seconds)  # float sums, not a forgery
        if u is None or m is None or u > m + slack or m > self.gpu_seconds + slack:
            return self
        return replace(self, used=u, measured=m)


def _figure(value: object) -> float | None:
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) and number >= 0 else None


class LedgerStore(Protocol):
    """Where a backend keeps the ledger (a JSON-lines file per user, a ConfigMap per user)."""

    def load(self, owner: str | None, clusters: Mapping[str, str]) -> list[Interval]:
        """The intervals of `owner` (None: every user's) that count (`owned`);
        `clusters`: the owner of each cluster that exists, by uid."""
        ...

    def save(self, owner: str, intervals: list[Interval], keep_after: float) -> None:
        """Merge `intervals` into `owner`'s ledger (conditionally: concurrent writers
        lose nothing), dropping what ended before `keep_after`."""
        ...


_said: set[tuple[str, str]] = set()  # (ledger, cluster uid) already warned of
_said_lock = threading.Lock()


def owned(ledger: str, stored: Iterable[Interval], clusters: Mapping[str, str]) -> list[Interval]:
    """What the ledger `ledger` (its user's `owner_label`) may bill: intervals of its own
    user, of clusters that are theirs. `clusters` maps the uid of each cluster that
    exists to its owner: the cluster's word beats the ledger's. A deleted cluster's
    interval is taken at its word; `merge` keeps it from touching another user's."""
    out: list[Interval] = []
    for interval in stored:
        owner = clusters.get(interval.uid, interval.owner)
        if owner_label(interval.owner) == ledger and owner == interval.owner:
            out.append(interval)
            continue
        with _said_lock:
            if (ledger, interval.uid) in _said:
                continue
            _said.add((ledger, interval.uid))
        log.warning(
            "raylab: GPU-hours ledger %r holds cluster %r (uid %s) of %s: not counted",
            ledger, interval.cluster, interval.uid, owner,
        )  # fmt: skip
    return out


def merge(intervals: Iterable[Interval]) -> list[Interval]:
    """Union per cluster and owner: overlapping or touching intervals with the same GPU
    count become one; where counts differ (a scale seen at slightly different times by
    two cullers), the later interval owns the overlap. Another owner's intervals of the
    same uid (only a forged ledger has them) stay apart."""
    by_uid: dict[tuple[str, str], list[Interval]] = defaultdict(list)
    for interval in intervals:
        by_uid[(interval.owner, interval.uid)].append(interval)
    out: list[Interval] = []
    for items in by_uid.values():
        items.sort(key=lambda i: (i.start, i.end))
        merged: list[Interval] = []
        for item in items:
            last = merged[-1] if merged else None
            if last is None or item.start > last.end:
                merged.append(item)
            elif item.gpus == last.gpus:
                merged[-1] = _union(last, item)
            elif item.end <= last.end and item.start == last.start:
                continue  # the same stretch, wholly covered
            else:
                cut = last.share(last.start, item.start)
                merged[-1] = replace(last, end=item.start, used=last.used * cut,
                                     measured=last.measured * cut)  # fmt: skip
                merged.append(item)
        out.extend(i for i in merged if i.end > i.start)
    return sorted(out, key=lambda i: (i.owner, i.start, i.uid))


def _union(first: Interval, second: Interval) -> Interval:
    """Two overlapping stretches of one cluster (first.start <= second.start). The same
    stretch written again, longer (a culler's flush), covers the first: its use stands.
    Otherwise the second adds the use of its part past the first's end."""
    if second.start <= first.start and second.end >= first.end:
        return replace(first, end=second.end, used=second.used, measured=second.measured)
    if second.end <= first.end:
        return first
    extra = second.share(first.end, second.end)
    return replace(
        first,
        end=second.end,
        used=first.used + second.used * extra,
        measured=first.measured + second.measured * extra,
    )


def usage_rows(intervals: Iterable[Interval], since: float, until: float) -> list[UsageRow]:
    """One row per user and GPU type: GPU-hours held, used and measured within [since, until]."""
    seconds: dict[tuple[str, str], list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    clusters: dict[tuple[str, str], set[str]] = defaultdict(set)
    for interval in merge(intervals):
        held = interval.between(since, until)
        if held > 0:
            key = (interval.owner, interval.gpu_type)
            share = interval.share(since, until)
            total = seconds[key]
            total[0] += held
            total[1] += interval.used * share
            total[2] += interval.measured * share
            clusters[key].add(interval.uid)
    rows = []
    for (owner, gpu_type), (held, used, measured) in sorted(seconds.items()):
        count = len(clusters[(owner, gpu_type)])
        rows.append(UsageRow(owner, gpu_type, count, held / 3600, used / 3600, measured / 3600))
    return rows


def cluster_hours(
    intervals: Iterable[Interval], since: float, until: float, what: str = "held"
) -> dict[str, float]:
    """GPU-hours by cluster uid within [since, until]: `held` (billed), `used` (busy) or
    `measured` (held while use could be read)."""
    hours: dict[str, float] = defaultdict(float)
    for interval in merge(intervals):
        if what == "held":
            hours[interval.uid] += interval.between(since, until) / 3600
        else:
            figure = interval.used if what == "used" else interval.measured
            hours[interval.uid] += figure * interval.share(since, until) / 3600
    return dict(hours)


class Meter:
    """Meters the clusters one culler sees, and writes them to the ledger now and then."""

    def __init__(
        self,
        store: LedgerStore,
        *,
        flush_s: float,
        retention_s: float,
        max_gap_s: float,
    ) -> None:
        self.store = store
        self.flush_s = flush_s
        self.retention_s = retention_s
        self.max_gap_s = max_gap_s
        self._open: dict[str, Interval] = {}  # uid -> the stretch being metered
        self._closed: list[Interval] = []  # ended since the last flush
        # (owner, uid) -> last interval in the owner's ledger
        self._last: dict[tuple[str, str], Interval] = {}
        self._loaded: set[str] = set()  # owners whose ledger was read
        self._flushed_at: float | None = None
        self._lock = threading.Lock()
        self.writes = 0  # ledger writes, for the benchmark
        # Busy GPU-seconds metered by the last `observe`, by (owner, GPU type): the metrics.
        self.used_added: dict[tuple[str, str], float] = {}

    def observe(
        self,
        clusters: Iterable[ClusterInfo],
        now: float,
        uses: Mapping[str, GpuUse] | None = None,
    ) -> dict[tuple[str, str], float]:
        """Fold in one sweep's view, with the GPU use read in it (by uid); returns
        GPU-seconds held since the last, by (owner, GPU type), for the metrics. A stretch
        is counted as used as the reading at its end says (a sweep apart)."""
        added: dict[tuple[str, str], float] = defaultdict(float)
        used_added: dict[tuple[str, str], float] = defaultdict(float)
        uses = uses or {}
        clusters = list(clusters)
        owners = {c.uid: c.owner for c in clusters if c.uid}
        with self._lock:
            seen: set[str] = set()
            for info in clusters:
                if info.phase not in BILLED or not info.spec.gpus or not info.uid:
                    continue
                seen.add(info.uid)
                gpus = info.spec.gpus
                current = self._open.get(info.uid)
                if current is not None and current.gpus == gpus:
                    step = max(0.0, now - current.end)
                    added[(info.owner, info.spec.gpu_type)] += gpus * step
                    used = current.used
                    measured = current.measured
                    use = uses.get(info.uid)
                    if use is not None and use.measured:
                        busy = min(float(gpus), use.busy_gpus) * step
                        used += busy
                        measured += gpus * step
                        used_added[(info.owner, info.spec.gpu_type)] += busy
                    self._open[info.uid] = replace(
                        current, end=max(current.end, now), used=used, measured=measured
                    )
                    continue
                if current is not None:
                    self._closed.append(replace(current, end=max(current.end, now)))
                start = now
                last = self._previous(info, owners)
                resumed = current is None and last is not None and last.gpus == gpus
                if resumed and last is not None and 0 <= now - last.end <= self.max_gap_s:
                    start = last.end  # a restart in between: it ran all along
                    added[(info.owner, info.spec.gpu_type)] += gpus * (now - start)
                self._open[info.uid] = Interval(
                    info.uid, info.name, info.owner, info.spec.gpu_type, gpus, start, now
                )
            for uid in [u for u in self._open if u not in seen]:
                # Suspended, deleted, failed or scaled to none: billed until last seen.
                self._closed.append(self._open.pop(uid))
        self.used_added = dict(used_added)
        if self._flushed_at is None:
            self._flushed_at = now
        elif now - self._flushed_at >= self.flush_s:
            self.flush(now)
        return dict(added)

    def flush(self, now: float) -> None:
        """Write what was metered to each user's ledger."""
        with self._lock:
            pending = [*self._closed, *self._open.values()]
            self._closed = []
            self._flushed_at = now
        by_owner: dict[str, list[Interval]] = defaultdict(list)
        for interval in pending:
            by_owner[interval.owner].append(interval)
        for owner, intervals in by_owner.items():
            self.store.save(owner, merge(intervals), keep_after=now - self.retention_s)
            self.writes += 1
            with self._lock:
                for interval in intervals:
                    key = (interval.owner, interval.uid)
                    last = self._last.get(key)
                    if last is None or interval.end >= last.end:
                        self._last[key] = interval

    def _previous(self, info: ClusterInfo, owners: Mapping[str, str]) -> Interval | None:
        """This cluster's last interval in its owner's ledger (read once), which is the
        only one that may continue it."""
        if info.owner not in self._loaded:
            self._loaded.add(info.owner)
            for interval in self.store.load(info.owner, owners):
                key = (interval.owner, interval.uid)
                last = self._last.get(key)
                if last is None or interval.end > last.end:
                    self._last[key] = interval
        return self._last.get((info.owner, info.uid))
