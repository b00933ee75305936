"""A kernel's own Ray node (joined_node.py), tried against a real local cluster: it joins
offering nothing to schedule, and it leaves, on `leave` and when the kernel that made it
is killed outright, with nothing of it left running or alive in the cluster; a kernel
interrupt leaves it be.

The kernel in a pod that drives a KubeRay cluster through such a node, and the pod that
cannot join and falls back to Ray Client: tests/kubernetes/test_kuberay_e2e.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from raylab.auth import AUTH_MODE_ENV, TOKEN_PATH_ENV, write_token_file
from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.kernel import joined_node
from raylab.model import Phase
from raylab.service import ClusterService

NAME = "join1"
NODES = """\
import json, sys, ray
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print(json.dumps([{"alive": n["Alive"], "port": n["NodeManagerPort"],
                   "cpu": n["Resources"].get("CPU", 0), "gpu": n["Resources"].get("GPU", 0)}
                  for n in ray.nodes()]))
"""
KERNEL = """\
import sys, time
from raylab.kernel import joined_node
node = joined_node.join(sys.argv[1])
print(node.ports[0], flush=True)
while True:
    try:
        time.sleep(600)
    except KeyboardInterrupt:  # as an interrupted cell: the kernel goes on
        print("interrupted", flush=True)
"""
# The interrupt test's kernel also runs a process in its own group that does not catch
# SIGINT, as a cell's subprocess would: once the kernel has seen it end, the interrupt has
# reached every process of the kernel's group and ended what it ends.
INTERRUPTED_KERNEL = """\
import subprocess, sys, time
from raylab.kernel import joined_node
node = joined_node.join(sys.argv[1])
canary = subprocess.Popen(["sleep", "600"])
print(node.ports[0], flush=True)
while True:
    try:
        time.sleep(600)
    except KeyboardInterrupt:
        print("interrupted", canary.wait(), flush=True)
"""


@pytest.fixture(scope="module")
def gcs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A running local cluster's GCS, with its token in this process's environment as
    `connect` puts it there."""
    settings = Settings.from_config()
    service = ClusterService(LocalBackend(settings.local_state_dir()), settings, "alice")
    service.create({"name": NAME, "workers": 1, "cpus": "1", "memory": "1Gi"})
    token_file = tmp_path_factory.mktemp("token") / "auth_token"
    saved = {k: os.environ.get(k) for k in (AUTH_MODE_ENV, TOKEN_PATH_ENV)}
    try:
        info = service.wait(NAME, lambda i: i.phase == Phase.READY, timeout=600)
        token = service.auth_token(NAME)
        assert token is not None
        assert info.endpoints.gcs is not None
        write_token_file(token_file, token)
        os.environ.update({AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(token_file)})
        yield info.endpoints.gcs
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        service.delete(NAME)


def nodes(gcs: str) -> list[dict[str, Any]]:
    """What Ray's GCS says of every node, read by a driver of its own."""
    done = subprocess.run([sys.executable, "-c", NODES, gcs], capture_output=True, text=True,
                          timeout=180, check=True)  # fmt: skip
    found: list[dict[str, Any]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def raylets_on(port: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.name() == "raylet" and f"--node_manager_port={port}" in proc.cmdline():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def process_group(proc: psutil.Process) -> int | None:
    try:
        return os.getpgid(proc.pid)
    except ProcessLookupError:  # ended meanwhile
        return None


def gone(gcs: str, port: int, timeout: float = 30.0) -> bool:
    """No raylet of the node runs here, and Ray no longer counts it alive."""
    deadline = time.monotonic() + timeout
    while raylets_on(port) and time.monotonic() < deadline:
        time.sleep(0.5)
    return not raylets_on(port) and not any(n["alive"] and n["port"] == port for n in nodes(gcs))


def test_a_joined_node_offers_nothing_and_leaves(gcs: str) -> None:
    node = joined_node.join(gcs)
    try:
        mine = [n for n in nodes(gcs) if n["alive"] and n["port"] == node.ports[0]]
        assert mine == [{"alive": True, "port": node.ports[0], "cpu": 0, "gpu": 0}]
        (raylet,) = raylets_on(node.ports[0])
        # Told its agents' ports, the raylet registers without waiting for them to start
        # and write them (a port of 0: they choose one, and it waits for the dashboard
        # agent to load, ~1.4 s more before the kernel can connect).
        told = dict(arg.split("=", 1) for arg in raylet.cmdline() if "agent_port=" in arg
                    or "agent-port=" in arg)  # fmt: skip
        assert told.get("--metrics-agent-port", "0") != "0", told
        assert told.get("--runtime_env_agent_port", "0") != "0", told
    finally:
        node.leave()
    assert gone(gcs, node.ports[0])
    assert not node.log.parent.exists()  # its folder goes with it


def test_the_node_leaves_when_its_kernel_is_killed(gcs: str) -> None:
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, gcs], stdout=subprocess.PIPE,
                              text=True)  # fmt: skip
    try:
        assert kernel.stdout is not None
        port = int(kernel.stdout.readline())
        assert raylets_on(port)
        kernel.send_signal(signal.SIGKILL)  # as the OOM killer ends a kernel: no clean-up
        kernel.wait(10)
        assert gone(gcs, port)
    finally:
        kernel.kill()


def test_an_interrupt_leaves_the_node_which_runs_in_its_kernels_session(gcs: str) -> None:
    # Jupyter starts a kernel in a session of its own and interrupts it with SIGINT to
    # its process group.
    argv = [sys.executable, "-c", INTERRUPTED_KERNEL, gcs]
    kernel = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert kernel.stdout is not None
        port = int(kernel.stdout.readline())
        (raylet,) = raylets_on(port)
        # Scheduled with its kernel (Linux's autogroup is per session): in a session of
        # its own the node answered each zero-copy get ~30 % slower.
        assert os.getsid(raylet.pid) == os.getsid(kernel.pid) == kernel.pid
        os.killpg(kernel.pid, signal.SIGINT)
        # The kernel caught it, and saw it end the process of its group that does not.
        assert kernel.stdout.readline().split() == ["interrupted", str(-signal.SIGINT)]
        assert raylet.is_running()
        assert raylets_on(port) == [raylet]
        # None of the node was in the group it reached: nothing of it got the signal.
        node = psutil.Process(kernel.pid).children(recursive=True)
        assert raylet in node
        assert [p.pid for p in node if process_group(p) == kernel.pid] == []
        assert any(n["alive"] and n["port"] == port for n in nodes(gcs))
        kernel.terminate()
        kernel.wait(10)
        assert gone(gcs, port)
    finally:
        if kernel.poll() is None:  # its group is still there: the kernel and its canary
            os.killpg(kernel.pid, signal.SIGKILL)
        kernel.wait(10)


def test_a_second_kernel_of_the_pod_takes_the_next_ports(gcs: str) -> None:
    first = joined_node.join(gcs)
    try:
        second = joined_node.join(gcs)
        try:
            assert second.ports == (first.ports[0] + 2, first.ports[1] + 2)
        finally:
            second.leave()
    finally:
        first.leave()
    assert gone(gcs, first.ports[0])
    assert gone(gcs, first.ports[0] + 2)
