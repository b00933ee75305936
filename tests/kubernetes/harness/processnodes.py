"""Process nodes: Nodes whose pods really run, as processes on this machine.

``procnode`` (go/procnode, a virtual-kubelet provider built by build.sh) plays their
kubelet. Each pod gets network, UTS and mount namespaces of its own (its IP on a bridge
in the tests' network namespace), each container a PID namespace and a memory cgroup
with its limit; init containers, restart policy and back-off, probes, logs, exec and
port-forward behave as under a kubelet. What differs, and why:

- Images are never pulled (nothing can be, here): a container runs its own ``command``
  with this machine's programs, the test venv's ``bin`` first on ``PATH`` (so ``ray`` is
  the tests' Ray, and ``python`` the kernel's). The nodes say so in their labels
  (``raylab.io/image-not-pulled=true``) and report ``imageID: procnode://image-not-pulled``.
- Containers run as root with this machine's file system as their image (the test
  venv's interpreter lives under /root): ``securityContext`` is not applied. /tmp, /home,
  /run, /mnt and /dev/shm are private to the pod or container.
- GPUs are advertised (``nvidia.com/gpu``) but not present: Ray gets its GPU count from
  ``rayStartParams`` (logical GPUs, as on the local backend).
- Cluster DNS is procnode's own (at the ``kube-dns``-style ClusterIP 10.96.0.10, answering
  from Services and EndpointSlices), given to pods as their resolv.conf. The only
  ClusterIP that carries traffic is the ``kubernetes`` Service's (procnode relays it to
  the API server): there is no kube-proxy, and KubeRay's head Service is headless.
- A test process outside the pods resolves Service names with :func:`resolving_env`
  (a mount namespace whose /etc/resolv.conf points at that DNS); the pods' IPs are
  reachable from anywhere in the tests' network namespace.

They need root and a network namespace of the tests' own (tests/netns.sh): procnode
adds a bridge and addresses there and refuses any namespace with other interfaces.
Ray's object store is sized by Ray itself from the container's memory limit, which it
reads from its cgroup, as in a real container.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HARNESS_DIR = Path(__file__).resolve().parent
PROCNODE_DIR = HARNESS_DIR / "go" / "procnode"

PROCESS_NODE_LABEL = "raylab.io/process-node"
IMAGE_NOT_PULLED_LABEL = "raylab.io/image-not-pulled"
PROCESS_GPU_TYPE = "proc"
PROCESS_TAINT: dict[str, str] = {
    "key": PROCESS_NODE_LABEL,
    "value": "true",
    "effect": "NoSchedule",
}
POD_CIDR = "10.245.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"  # first address of the Service CIDR, as always
DNS_SERVICE_IP = "10.96.0.10"
CLUSTER_DOMAIN = "cluster.local"


@dataclass(frozen=True)
class ProcessNode:
    name: str
    cpu: str
    memory: str
    gpus: int = 0
    pods: int = 110

    def labels(self) -> dict[str, str]:
        labels = {
            "type": "procnode",
            PROCESS_NODE_LABEL: "true",
            IMAGE_NOT_PULLED_LABEL: "true",
        }
        if self.gpus:
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    # Honest about what Ray gets here: GPUs it counts, not devices.
                    "nvidia.com/gpu.product": "Logical-GPU-no-device",
                    "nvidia.com/gpu.count": str(self.gpus),
                    "raylab.io/gpu-type": PROCESS_GPU_TYPE,
                }
            )
        return labels

    def taints(self) -> list[dict[str, str]]:
        taints = [dict(PROCESS_TAINT)]
        if self.gpus:
            taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
        return taints

    def capacity(self) -> dict[str, str]:
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        capacity["ephemeral-storage"] = "100Gi"
        if self.gpus:
            capacity["nvidia.com/gpu"] = str(self.gpus)
        return capacity


# As real clusters are laid out: heads on a CPU pool, GPU workers on a tainted GPU pool.
# Capacity is what the scheduler counts, not this machine's: two small clusters (a head
# and two workers each) fit with room for restarts.
PROCESS_NODES: tuple[ProcessNode, ...] = (
    ProcessNode("proc-cpu-0", "8", "32Gi"),
    ProcessNode("proc-gpu-0", "16", "64Gi", gpus=8),
)


def process_profile() -> dict[str, Any]:
    """The ``c.Raylab.gpu_types`` entry that puts a whole cluster on the process nodes."""
    toleration = {"key": PROCESS_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    selector = {PROCESS_NODE_LABEL: "true"}
    return {
        "description": "Process nodes of the test control plane (logical GPUs)",
        "node_selector": dict(selector),
        "tolerations": [dict(toleration), gpu],
        "head_node_selector": dict(selector),
        "head_tolerations": [dict(toleration)],
        "max_gpus_per_worker": 4,
        "default_cpus": "1",
        "default_memory": "2Gi",
    }


def procnode_version() -> str:
    """virtual-kubelet's version and a hash of procnode's sources (as build.sh)."""
    names = sorted(
        p.name
        for p in PROCNODE_DIR.iterdir()
        if p.suffix == ".go" or p.name in ("go.mod", "go.sum")
    )
    digest = hashlib.sha256(b"".join((PROCNODE_DIR / n).read_bytes() for n in names))
    vk = "github.com/virtual-kubelet/virtual-kubelet"
    for line in (PROCNODE_DIR / "go.mod").read_text().splitlines():
        fields = line.split()
        if vk in fields[:-1]:
            return f"{fields[fields.index(vk) + 1]}-{digest.hexdigest()[:12]}"
    raise RuntimeError(f"{vk} not required in {PROCNODE_DIR / 'go.mod'}")


def unavailable_reason() -> str | None:
    """Why process nodes cannot run here, or None."""
    if not sys.platform.startswith("linux"):
        return "process nodes need Linux namespaces"
    if os.geteuid() != 0:
        return "process nodes need root (network, mount and PID namespaces, cgroups)"
    # Not /sys/class/net: sysfs shows the namespace it was mounted in.
    interfaces = sorted(name for _, name in socket.if_nameindex())
    if interfaces != ["lo"]:
        return (
            "process nodes run only in the tests' own network namespace (tests/netns.sh), "
            f"but this one has {interfaces}"
        )
    for tool in ("ip", "nsenter", "unshare", "bash", "wget"):
        if shutil.which(tool) is None:
            return f"process nodes need {tool!r} on PATH"
    return None


def memory_cgroup_parent(tag: str) -> Path | None:
    """A memory cgroup (v1) of this process's own, for the containers' limits."""
    root = Path("/sys/fs/cgroup/memory")
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(",") and (root / "cgroup.procs").exists():
            parent = root / path.lstrip("/") / tag
            try:
                parent.mkdir(parents=True, exist_ok=True)
            except OSError:
                return None
            return parent
    return None


def remove_cgroup_tree(path: Path) -> None:
    """rmdir a cgroup and its children, deepest first (each must have no processes)."""
    if not path.is_dir():
        return
    for sub in sorted((p for p in path.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts)):
        with contextlib.suppress(OSError):
            sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def write_config(
    path: Path,
    *,
    kubeconfig: Path,
    state_dir: Path,
    binary: Path,
    apiserver: str,
    pki: Path,
    ports: list[int],
    cgroup_parent: Path | None,
) -> None:
    config = {
        "kubeconfig": str(kubeconfig),
        "stateDir": str(state_dir),
        "imageBin": str(Path(sys.executable).parent),
        # The "image" is this venv (and the Python it was made from): a pod's private
        # /tmp or /home must not hide it when the checkout lies there (a CI clone).
        "imagePaths": sorted({sys.prefix, sys.base_prefix}),
        "binary": str(binary),
        "apiServer": apiserver,
        "kubernetesServiceIP": KUBERNETES_SERVICE_IP,
        "dnsServiceIP": DNS_SERVICE_IP,
        "clusterDomain": CLUSTER_DOMAIN,
        "podCIDR": POD_CIDR,
        "bridge": "procbr0",
        "tlsCert": str(pki / "procnode.crt"),
        "tlsKey": str(pki / "procnode.key"),
        "clientCA": str(pki / "ca.crt"),
        "cgroupParent": str(cgroup_parent or ""),
        "nodes": [
            {
                "name": node.name,
                "port": port,
                "capacity": node.capacity(),
                "labels": node.labels(),
                "taints": node.taints(),
            }
            for node, port in zip(PROCESS_NODES, ports, strict=True)
        ],
    }
    path.write_text(json.dumps(config, indent=2))


def resolving_env(work_dir: Path) -> list[str]:
    """argv prefix that runs a command with cluster DNS, as a process in a pod resolves.

    ``unshare --mount`` gives the command a mount namespace of its own in which
    /etc/resolv.conf names procnode's DNS with the ``default`` namespace's search path;
    nothing outside it changes.
    """
    resolv = work_dir / "resolv.conf"
    resolv.write_text(
        f"search default.svc.{CLUSTER_DOMAIN} svc.{CLUSTER_DOMAIN} {CLUSTER_DOMAIN}\n"
        f"nameserver {DNS_SERVICE_IP}\noptions ndots:5\n"
    )
    script = f'mount --bind "{resolv}" /etc/resolv.conf && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "resolving"]
