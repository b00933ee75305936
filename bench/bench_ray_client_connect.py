"""Ray Client's connect against its proxier's gRPC reconnect back-off: evidence for Ray.

A kernel outside Kubernetes connects through Ray Client. For each new client the head's
proxier starts a server process of its own, then waits on a gRPC channel to it. The
channel's first try comes before that process listens (it is still importing Ray), and
gRPC's default back-off makes the next try 1 s later (±20 %), then 1.6 s after that:
a server that needs just over a second to listen costs the client up to ~1.6 s more.
In two claims of a KubeRay standby traced step by step (bench_kuberay_up.py's `up`),
Ray Client's `ray.init` was 3.3 to 3.5 s of a 5.3 to 5.8 s `up`.

One local head (`ray start --head`); alternating in one run, a proxier exactly as Ray
starts it (`python -m ray.util.client.server --mode proxy`), and the same proxier with
its channel's back-off set to 100 ms (`grpc.initial_reconnect_backoff_ms`,
`grpc.min_reconnect_backoff_ms`, `grpc.max_reconnect_backoff_ms` 500), each on a port of
its own; against each, `ray.init("ray://…")` in a fresh Python process with Ray already
imported, timed alone. Reported (it is Ray's code, not raylab's): the medians and the
worst connect of each.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from report import Figure, emit, median

from raylab.backends.local.ports import PortPicker

ROUNDS = int(os.environ.get("ROUNDS", "6"))
RAY = str(Path(sys.executable).parent / "ray")

PROXIER = """
import sys
short, gcs, agent, port = sys.argv[1] == "short", sys.argv[2], sys.argv[3], sys.argv[4]
import ray.util.client.server.proxier as proxier
if short:
    proxier.GRPC_OPTIONS = [*proxier.GRPC_OPTIONS, ("grpc.initial_reconnect_backoff_ms", 100),
                            ("grpc.min_reconnect_backoff_ms", 100),
                            ("grpc.max_reconnect_backoff_ms", 500)]
from ray.util.client.server.server import main
sys.argv = ["server", f"--address={gcs}", "--host=127.0.0.1", f"--port={port}",
            "--mode=proxy", f"--runtime-env-agent-address={agent}"]
main()
"""

CONNECT = """
import logging, sys, time
import ray
t = time.perf_counter()
ray.init(f"ray://127.0.0.1:{sys.argv[1]}", logging_level=logging.WARNING)
print("CONNECT", time.perf_counter() - t, flush=True)
assert ray.get(ray.put(1)) == 1
ray.shutdown()
"""


def listening(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port}")


def connect_once(variant: str, gcs: str, agent: str, port: int) -> float:
    proxier = subprocess.Popen([sys.executable, "-c", PROXIER, variant, gcs, agent, str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        listening(port)
        time.sleep(2)  # settled, as a head's proxier waits for its clients
        done = subprocess.run([sys.executable, "-c", CONNECT, str(port)],
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        for line in done.stdout.splitlines():
            if line.startswith("CONNECT "):
                return float(line.split()[1])
        raise RuntimeError(done.stdout + done.stderr)
    finally:
        proxier.terminate()
        proxier.wait(30)


def run() -> list[Figure]:
    env = dict(os.environ, RAY_DISABLE_USAGE_STATS="1")
    # Ports as raylab's local nodes take them: outside the ephemeral range and Ray's
    # worker ports, so no outgoing connection takes one between the choice and the bind.
    ports = PortPicker()
    gcs_port, agent_port = ports.take(), ports.take()
    with tempfile.TemporaryDirectory(prefix="rcb") as tmp:
        subprocess.run(
            [RAY, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs_port}",
             f"--ray-client-server-port={ports.take()}", f"--runtime-env-agent-port={agent_port}",
             f"--dashboard-port={ports.take()}",
             "--dashboard-host=127.0.0.1", "--num-cpus=2", f"--temp-dir={tmp}"],
            env=env, check=True, capture_output=True,
        )  # fmt: skip
        try:
            gcs, agent = f"127.0.0.1:{gcs_port}", f"http://127.0.0.1:{agent_port}"
            samples: dict[str, list[float]] = {"default": [], "short": []}
            for i in range(ROUNDS):
                for variant in ("default", "short") if i % 2 == 0 else ("short", "default"):
                    samples[variant].append(connect_once(variant, gcs, agent, ports.take()))
        finally:
            subprocess.run([RAY, "stop", "--force"], env=env, capture_output=True)
    default, short = samples["default"], samples["short"]
    anchor = "Ray's proxier as it is (gRPC's default back-off)"
    return [
        Figure(name="Ray Client connect, proxier with a 100 ms back-off (median)",
               value=median(short), unit="s", target="reported", anchor=median(default),
               anchor_name=anchor, samples=short, anchor_samples=default),
        Figure(name="Ray Client connect, proxier with a 100 ms back-off (worst)",
               value=max(short), unit="s", target="reported", anchor=max(default),
               anchor_name=anchor, samples=short, anchor_samples=default),
    ]  # fmt: skip


if __name__ == "__main__":
    emit("Ray Client's connect against its proxier's reconnect back-off", run(),
         "ray_client_connect")  # fmt: skip
