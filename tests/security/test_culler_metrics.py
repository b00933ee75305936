"""Attack: the standalone culler's /metrics listened on every interface, without auth.

`raylab culler --metrics-port N` bound 0.0.0.0, so anyone who could reach the machine
(or the pod) read every user's cluster names, GPU counts and idle times. It now binds
127.0.0.1 unless told otherwise (`--metrics-host`, e.g. 0.0.0.0 in a pod that Prometheus
scrapes). The real `raylab culler` runs here in a process of its own (local backend),
and the address it listens on is read from the operating system.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def culler(*options: str) -> Iterator[tuple[psutil.Process, int]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "raylab.cli", "culler", "--backend", "local", "--interval",
         "3600", "--metrics-port", str(port), *options],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield psutil.Process(proc.pid), port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def listening(process: psutil.Process, port: int) -> list[str]:
    """The addresses `process` listens on at `port`, once it does (within a minute)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = [c.laddr.ip for c in process.net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN and c.laddr.port == port]  # fmt: skip
        if found:
            return found
        assert process.status() != psutil.STATUS_ZOMBIE, "the culler exited"
        time.sleep(0.2)
    raise AssertionError(f"nothing listens on port {port}")


def test_metrics_listen_on_loopback_only_by_default() -> None:
    with culler() as (process, port):
        assert listening(process, port) == ["127.0.0.1"]


@pytest.mark.parametrize("option", ["--metrics-host", "--metrics-address"])
def test_another_address_is_a_deliberate_choice(option: str) -> None:
    with culler(option, "0.0.0.0") as (process, port):
        assert listening(process, port) == ["0.0.0.0"]
