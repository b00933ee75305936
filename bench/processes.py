"""The processes a cluster holds on this machine, for the benches that report what a waiting
standby costs."""

from __future__ import annotations

import time
from collections.abc import Callable

import psutil


def marked(
    var: str, value: str, also: Callable[[list[str]], bool] = lambda cmd: False
) -> list[psutil.Process]:
    """Every process whose environment sets `var` to `value` (or whose command line `also`
    picks), with all their children: Ray's agents rename themselves (`ray::DashboardAgent`)
    over the memory that held their environment, so only their parents' can be read."""
    found: dict[int, psutil.Process] = {}
    for proc in psutil.process_iter():
        try:
            if proc.environ().get(var) == value or also(proc.cmdline()):
                found[proc.pid] = proc
                found.update((child.pid, child) for child in proc.children(recursive=True))
        except psutil.Error:
            continue
    return list(found.values())


def memory_mib(procs: list[psutil.Process]) -> tuple[float, float]:
    """Their resident memory summed (pages they share, counted once per process) and their
    proportional share of it (PSS: each shared page split among its processes), in MiB."""
    rss = pss = 0
    for proc in procs:
        try:
            info = proc.memory_full_info()
        except psutil.Error:  # ended meanwhile
            continue
        rss, pss = rss + info.rss, pss + info.pss
    return rss / 2**20, pss / 2**20


def waiting_cost(procs: list[psutil.Process], over_s: float = 5.0) -> dict[str, float]:
    """What `procs` hold while they wait: their memory (memory_mib) and their CPU over
    `over_s`, in % of a core, counting those still running at its end."""
    cpu0 = sum(sum(p.cpu_times()[:2]) for p in procs)
    time.sleep(over_s)
    alive = [p for p in procs if p.is_running()]
    cpu1 = sum(sum(p.cpu_times()[:2]) for p in alive)
    rss, pss = memory_mib(alive)
    return {"rss_mib": rss, "pss_mib": pss, "cpu_pct": (cpu1 - cpu0) / over_s * 100,
            "processes": len(alive)}  # fmt: skip
