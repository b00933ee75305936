"""Ports for local nodes and a kernel's own node in a pod (kernel/joined_node.py), chosen up front.

A Ray node left to pick its agents' ports (port 0) makes its raylet wait for each agent
to bind and write the port into the session folder, with a fixed 30 s limit; on a busy
two-core machine the agents' imports alone can take longer, the raylet aborts ("Timed out
waiting for file …/metrics_agent_port_…"), and the node never registers. With every port
given on the command line the raylet waits for nothing and registers at once.

Ports are taken below the kernel's ephemeral range and above Ray's worker ports
(10002-19999), so no outgoing connection and no Ray worker can take one between the
choice and the bind; and never one that another local cluster holds.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterable

RAY_WORKER_PORTS_END = 20000  # Ray's default worker ports end at 19999
# Every port a node's agents would otherwise choose themselves, as `ray start` names them.
AGENT_PORTS = (
    "dashboard-agent-grpc-port",
    "dashboard-agent-listen-port",
    "metrics-export-port",
    "runtime-env-agent-port",
)
_EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range"


def _ephemeral_start() -> int:
    with contextlib.suppress(OSError, ValueError), open(_EPHEMERAL_RANGE) as fh:
        return int(fh.read().split()[0])
    return 32768  # Linux's default


def bindable(port: int) -> bool:
    """Free on every address: agents bind the node's IP or all of them."""
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


class PortPicker:
    """Hands out free ports that nobody else holds; `taken` are other clusters' ports."""

    def __init__(self, taken: Iterable[int] = ()) -> None:
        self.taken = set(taken)
        low, high = RAY_WORKER_PORTS_END, _ephemeral_start()
        # A machine whose ephemeral range starts low leaves no safe range: let the
        # kernel choose (and the start-up retry covers the rare clash).
        self.candidates = list(range(low, high)) if high - low >= 1000 else []
        random.shuffle(self.candidates)

    def take(self) -> int:
        while self.candidates:
            port = self.candidates.pop()
            if port not in self.taken and bindable(port):
                self.taken.add(port)
                return port
        with socket.socket() as s:
            s.bind(("", 0))
            port = int(s.getsockname()[1])
        self.taken.add(port)
        return port

    def take_many(self, names: Iterable[str]) -> dict[str, int]:
        return {name: self.take() for name in names}
