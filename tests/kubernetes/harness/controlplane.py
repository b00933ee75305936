"""A real Kubernetes control plane on 127.0.0.1 for tests: no Docker, no kubelet.

Processes (each in its own process group, logs in ``log_dir/<name>.log``):

- etcd, kube-apiserver (token auth + RBAC), kube-controller-manager (garbage
  collection, namespaces, service accounts, node lifecycle), kube-scheduler;
- KWOK, which plays the kubelets of the fake nodes below: it keeps their heartbeats
  (node leases) and marks pods bound to them Running and Ready with a fake pod IP;
- the real KubeRay operator, watching all namespaces. Its CRDs (rayclusters, rayjobs,
  rayservices) are installed before the controller-manager starts, so the garbage
  collector knows ``RayCluster`` from its first discovery and deleting one removes
  its pods;
- procnode, the kubelet of the *process nodes* (processnodes.py), whose pods really
  run: Ray heads and workers as processes, each pod with its own IP and namespaces.
  Started where it can run (root, the tests' own network namespace); otherwise
  ``process_nodes_unavailable`` says why and only the KWOK nodes exist;
- on request only (``start_kueue``/``stop_kueue``), the real Kueue controller, as a
  pod of the process node ``proc-cpu-0``, with its webhooks and visibility API.

Binaries come from ``build.sh``, cached under
``${RAYLAB_CACHE:-~/.cache/raylab}/k8s-bin/<component>-<version>/``.

Users (static tokens, ``--token-auth-file``); ``kubeconfig(user)`` gives each a file:

- ``admin``: group ``system:masters`` (cluster-admin); the components use it too.
- ``alice``, ``bob``: no groups, so no rights beyond those of every authenticated
  user (discovery, self-subject reviews). Tests grant rights with Role/RoleBinding.

TLS: a throwaway CA made with the ``openssl`` CLI signs the apiserver's serving
certificate (SANs 127.0.0.1, localhost, kubernetes.default.svc, ...). Kubeconfigs
embed that CA, so clients verify TLS for real (no insecure-skip-tls-verify). A
restarted apiserver reuses the same port, certificates, tokens and etcd.

Fake nodes (what the product's GPU profiles target):

===========  ==============  ==================================================
node         nvidia.com/gpu  labels (besides kubernetes.io/hostname, os, arch)
===========  ==============  ==================================================
kwok-a100-0  8               nvidia.com/gpu.product=NVIDIA-A100-SXM4-80GB,
kwok-a100-1  8               nvidia.com/gpu.count=8,
                             nvidia.com/gpu.memory=81920,
                             nvidia.com/gpu.present=true,
                             raylab.io/gpu-type=a100
kwok-h100-0  4               nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3,
                             nvidia.com/gpu.count=4,
                             nvidia.com/gpu.memory=81559,
                             nvidia.com/gpu.present=true,
                             raylab.io/gpu-type=h100
kwok-cpu-0   -               (none)
proc-cpu-0   -               raylab.io/process-node=true,
                             raylab.io/image-not-pulled=true
proc-gpu-0   8 (logical)     raylab.io/process-node=true,
                             raylab.io/image-not-pulled=true,
                             raylab.io/gpu-type=proc (see processnodes.py)
===========  ==============  ==================================================

Every GPU node has the taint ``nvidia.com/gpu=present:NoSchedule``, as real GPU node
pools do: a GPU pod needs that toleration plus a ``nodeSelector`` such as
``raylab.io/gpu-type: a100``, and pods without the toleration (a Ray head, say) land
on ``kwok-cpu-0``. All nodes also carry the label ``type=kwok`` and the annotation
``kwok.x-k8s.io/node=fake``. GPU nodes have 64 cpu and 512Gi memory, the CPU node 32
cpu and 128Gi; 110 pods each. The process node also has the taint
``raylab.io/process-node=true:NoSchedule``: only pods meant for it (the ``proc`` GPU
profile of the end-to-end tests) land there; nothing else runs Ray by accident.

By hand::

    python tests/kubernetes/harness/controlplane.py build  # run build.sh
    python tests/kubernetes/harness/controlplane.py up     # start; print KUBECONFIG
    python tests/kubernetes/harness/controlplane.py up --kueue  # with Kueue (as root,
                                                   # in tests/netns.sh: process nodes)
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import ctypes
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Any, Self, TypeVar, cast

import processnodes
import yaml
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

__all__ = [
    "FAKE_NODES",
    "GPU_RESOURCE",
    "GPU_TAINT",
    "NODE_LEASE_SECONDS",
    "USERS",
    "Binaries",
    "ControlPlane",
    "ControlPlaneError",
    "FakeNode",
    "call_json",
    "ensure_built",
    "wait_until",
]

log = logging.getLogger("raylab.k8s")

HARNESS_DIR = Path(__file__).resolve().parent
BUILD_SCRIPT = HARNESS_DIR / "build.sh"
USERS = ("admin", "alice", "bob")
KUBERAY_CRDS = (
    "ray.io_rayclusters.yaml",
    "ray.io_rayjobs.yaml",
    "ray.io_rayservices.yaml",
)
PROMOP_MOD = "github.com/prometheus-operator/prometheus-operator"
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"
FRONT_PROXY_CLIENT = "front-proxy-client"  # the aggregator's client certificate's CN
KWOK_NODE_ANNOTATION = ("kwok.x-k8s.io/node", "fake")
NODE_LEASE_SECONDS = 40  # as a kubelet's default
NODE_MONITOR_GRACE = "3m"  # how long a node may miss heartbeats before it is lost
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT: dict[str, str] = {
    "key": GPU_RESOURCE,
    "value": "present",
    "effect": "NoSchedule",
}

T = TypeVar("T")


class ControlPlaneError(RuntimeError):
    """The control plane could not be built, started or stopped cleanly."""


# ------------------------------------------------------------------------- fake nodes


@dataclass(frozen=True)
class FakeNode:
    name: str
    cpu: str
    memory: str
    gpus: int = 0
    gpu_product: str | None = None
    gpu_memory_mib: int | None = None
    gpu_type: str | None = None  # value of raylab.io/gpu-type
    pods: int = 110

    def manifest(self) -> dict[str, Any]:
        labels = {
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "type": "kwok",
        }
        capacity = {
            "cpu": self.cpu,
            "memory": self.memory,
            "pods": str(self.pods),
            "ephemeral-storage": "1Ti",
        }
        taints: list[dict[str, str]] = []
        if self.gpus:
            # Labels as NVIDIA's GPU feature discovery sets them, plus a short one.
            labels.update(
                {
                    "nvidia.com/gpu.present": "true",
                    "nvidia.com/gpu.product": self.gpu_product or "",
                    "nvidia.com/gpu.count": str(self.gpus),
                    "nvidia.com/gpu.memory": str(self.gpu_memory_mib or 0),
                    "raylab.io/gpu-type": self.gpu_type or "",
                }
            )
            capacity[GPU_RESOURCE] = str(self.gpus)
            taints.append(dict(GPU_TAINT))
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {KWOK_NODE_ANNOTATION[0]: KWOK_NODE_ANNOTATION[1]},
            },
            "spec": {"taints": taints},
            # Nodes are the one kind whose status the apiserver keeps on create; KWOK
            # fills in conditions, addresses and nodeInfo.
            "status": {"capacity": capacity, "allocatable": dict(capacity)},
        }


FAKE_NODES: tuple[FakeNode, ...] = (
    FakeNode("kwok-a100-0", "64", "512Gi", 8, "NVIDIA-A100-SXM4-80GB", 81920, "a100"),
    FakeNode("kwok-a100-1", "64", "512Gi", 8, "NVIDIA-A100-SXM4-80GB", 81920, "a100"),
    FakeNode("kwok-h100-0", "64", "512Gi", 4, "NVIDIA-H100-80GB-HBM3", 81559, "h100"),
    FakeNode("kwok-cpu-0", "32", "128Gi"),
)


# --------------------------------------------------------------------------- binaries


def cache_root() -> Path:
    return Path(os.environ.get("RAYLAB_CACHE") or Path.home() / ".cache" / "raylab")


def _module_version(wrapper: str, module: str) -> str:
    """The version of ``module`` required by ``go/<wrapper>/go.mod`` (as build.sh)."""
    gomod = HARNESS_DIR / "go" / wrapper / "go.mod"
    for line in gomod.read_text().splitlines():
        fields = line.split()
        if module in fields[:-1]:
            return fields[fields.index(module) + 1]
    raise ControlPlaneError(f"{module} not required in {gomod}")


def kueue_version() -> str:
    return _module_version("kueue", "sigs.k8s.io/kueue")


@dataclass(frozen=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kwok: Path
    ray_operator: Path
    procnode: Path
    kueue: Path
    # Not part of the control plane: the chart's tests install it with helm and
    # validate its optional ServiceMonitor against the prometheus-operator's CRD.
    helm: Path
    servicemonitor_crd: Path

    @classmethod
    def locate(cls, root: Path | None = None) -> Binaries:
        base = (root or cache_root()) / "k8s-bin"
        k8s = _module_version("kubernetes", "k8s.io/kubernetes")

        def at(name: str, version: str) -> Path:
            return base / f"{name}-{version}" / name

        return cls(
            etcd=at("etcd", _module_version("etcd", "go.etcd.io/etcd/server/v3")),
            kube_apiserver=at("kube-apiserver", k8s),
            kube_controller_manager=at("kube-controller-manager", k8s),
            kube_scheduler=at("kube-scheduler", k8s),
            kwok=at("kwok", _module_version("kwok", "sigs.k8s.io/kwok")),
            ray_operator=at(
                "ray-operator",
                _module_version("kuberay", "github.com/ray-project/kuberay/ray-operator"),
            ),
            procnode=at("procnode", processnodes.procnode_version()),
            kueue=at("kueue", kueue_version()),
            helm=at("helm", _module_version("helm", "helm.sh/helm/v4")),
            servicemonitor_crd=base
            / f"prometheus-operator-{_module_version('prometheus-operator', PROMOP_MOD)}"
            / "monitoring.coreos.com_servicemonitors.yaml",
        )

    @property
    def crds(self) -> list[Path]:
        return [self.ray_operator.parent / name for name in KUBERAY_CRDS]

    @property
    def kueue_config(self) -> Path:
        """Kueue's ``config/components`` (kustomize inputs), copied by build.sh."""
        return self.kueue.parent / "config" / "components"

    @property
    def kueue_crds(self) -> list[Path]:
        return sorted((self.kueue_config / "crd" / "bases").glob("kueue.x-k8s.io_*.yaml"))

    def missing(self) -> list[Path]:
        paths = [
            self.etcd,
            self.kube_apiserver,
            self.kube_controller_manager,
            self.kube_scheduler,
            self.kwok,
            self.ray_operator,
            self.procnode,
            *self.crds,
            self.kueue,
            self.kueue_config / "crd" / "bases" / "kueue.x-k8s.io_workloads.yaml",
            self.kueue_config / "webhook" / "manifests.yaml",
            self.helm,
            self.servicemonitor_crd,
        ]
        return [p for p in paths if not p.is_file()]


def ensure_built(root: Path | None = None) -> Binaries:
    """Run build.sh if any binary is missing (a cold build takes tens of minutes)."""
    binaries = Binaries.locate(root)
    if binaries.missing():
        env = dict(os.environ)
        if root is not None:
            env["RAYLAB_CACHE"] = str(root)
        log.warning("Kubernetes binaries missing; running %s (slow when cold)", BUILD_SCRIPT)
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=True, env=env)
        if missing := binaries.missing():
            raise ControlPlaneError(f"build.sh finished but these are missing: {missing}")
    return binaries


# ---------------------------------------------------------------------------- helpers


def wait_until(
    what: str,
    probe: Callable[[], T | None],
    timeout: float = 60.0,
    interval: float = 0.25,
    check: Callable[[], None] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; exceptions count as "not yet".

    ``check`` runs each round and may raise to give up early (a process died).
    """
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        if check is not None:
            check()
        try:
            result = probe()
        except Exception as exc:  # anything means "not ready yet"
            last_error = exc
        else:
            if result:
                return result
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}{detail}")
        time.sleep(interval)


def call_json(method: Callable[..., object], *args: Any, **kwargs: Any) -> Any:
    """Call a kubernetes-client API method and return the decoded JSON body.

    Skips the client's model classes: they are slow on megabyte CRDs, and plain dicts
    are simpler to assert on (the same shape as ``kubectl get -o json``).
    """
    response = cast(Any, method(*args, _preload_content=False, **kwargs))
    return json.loads(response.data)


_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _crd_name(path: Path) -> str:
    # controller-gen names its files <group>_<plural>.yaml; the CRD is <plural>.<group>.
    group, plural = path.stem.split("_", 1)
    return f"{plural}.{group}"


def _free_ports(count: int) -> list[int]:
    # Hold all sockets open until every port is chosen so that they are distinct.
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(sock.getsockname()[1])
        return ports


def _openssl(command: str, cwd: Path) -> None:
    argv = ["openssl", *shlex.split(command)]
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ControlPlaneError(f"{' '.join(argv)} failed:\n{proc.stderr}")


def _load_prctl() -> Callable[..., int] | None:
    try:
        return cast(Callable[..., int], ctypes.CDLL(None, use_errno=True).prctl)
    except (OSError, AttributeError):  # not Linux
        return None


# Looked up once here: the child between fork and exec should do as little as possible.
_PRCTL = _load_prctl()
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child before exec: if the test runner is killed outright, the kernel
    # sends SIGTERM to the component instead of leaving it behind. It does so when the
    # *thread* that forked the child ends, so components are started from one that lasts.
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _http_ok(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, context=context, timeout=timeout) as resp:
            return bool(resp.status == HTTPStatus.OK)
    except (urllib.error.URLError, OSError):
        return False


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


@dataclass
class _Process:
    name: str
    log_path: Path
    popen: subprocess.Popen[bytes]

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None


# ------------------------------------------------------------------------------ Kueue

KUEUE_NAMESPACE = "kueue-system"
KUEUE_PREFIX = "kueue-"  # config/default's namePrefix
KUEUE_GROUP = "kueue.x-k8s.io"
# Only these integrations: the webhook configurations then name no other kind (pods,
# jobs, deployments, ...), so nothing else in the cluster waits on Kueue.
KUEUE_FRAMEWORKS = ("ray.io/raycluster", "ray.io/rayjob")
KUEUE_POD = f"{KUEUE_PREFIX}controller-manager"
KUEUE_SERVICE_ACCOUNT = f"{KUEUE_PREFIX}controller-manager"
KUEUE_WEBHOOK_SERVICE = f"{KUEUE_PREFIX}webhook-service"
KUEUE_VISIBILITY_SERVICE = f"{KUEUE_PREFIX}visibility-server"
KUEUE_CONFIG_MAP = f"{KUEUE_PREFIX}manager-config"
KUEUE_CERT_SECRET = f"{KUEUE_PREFIX}webhook-server-cert"
KUEUE_LABELS = {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}
KUEUE_NODE = "proc-cpu-0"
# Where the pod sees the binary's folder and its config: /mnt is private to the pod
# (a process node makes mount points only there, /tmp, /home, /run).
KUEUE_BINARY_MOUNT = "/mnt/kueue"
KUEUE_CONFIG_MOUNT = "/mnt/kueue-config"
KUEUE_CERT_DIR = "/tmp/k8s-webhook-server/serving-certs"  # webhook.certDir's default
KUEUE_HEALTH_PORT = 8081
KUEUE_WEBHOOK_PORT = 9443
KUEUE_VISIBILITY_PORT = 8082
# The CRDs whose conversion webhook config/components/crd/kustomization.yaml enables;
# Kueue's cert rotator injects its CA into exactly these (pkg/util/cert/cert.go).
KUEUE_CONVERSION_CRDS = (
    "localqueues",
    "clusterqueues",
    "cohorts",
    "workloads",
    "multikueueclusters",
)
KUEUE_VISIBILITY_VERSIONS = ("v1beta1", "v1beta2")
# Kinds whose objects Kueue puts its finalizer on; stop_kueue lifts it (see there).
KUEUE_FINALIZED = (
    "workloads",
    "clusterqueues",
    "resourceflavors",
    "admissionchecks",
    "topologies",
)
_MANAGER = "raylab-harness"  # field manager of what the harness applies

# API path prefix, plural and namespaced-or-not of each kind the harness applies for Kueue.
_KINDS: dict[str, tuple[str, str, bool]] = {
    "Namespace": ("/api/v1", "namespaces", False),
    "ServiceAccount": ("/api/v1", "serviceaccounts", True),
    "Secret": ("/api/v1", "secrets", True),
    "ConfigMap": ("/api/v1", "configmaps", True),
    "Service": ("/api/v1", "services", True),
    "Pod": ("/api/v1", "pods", True),
    "ClusterRole": ("/apis/rbac.authorization.k8s.io/v1", "clusterroles", False),
    "ClusterRoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "clusterrolebindings", False),
    "Role": ("/apis/rbac.authorization.k8s.io/v1", "roles", True),
    "RoleBinding": ("/apis/rbac.authorization.k8s.io/v1", "rolebindings", True),
    "MutatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "mutatingwebhookconfigurations",
        False,
    ),
    "ValidatingWebhookConfiguration": (
        "/apis/admissionregistration.k8s.io/v1",
        "validatingwebhookconfigurations",
        False,
    ),
    "APIService": ("/apis/apiregistration.k8s.io/v1", "apiservices", False),
}


def _object_path(doc: dict[str, Any], named: bool = True) -> str:
    prefix, plural, namespaced = _KINDS[doc["kind"]]
    meta = doc["metadata"]
    path = prefix
    if namespaced:
        path += f"/namespaces/{meta['namespace']}"
    path += f"/{plural}"
    return f"{path}/{meta['name']}" if named else path


def _load_yaml(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _kueue_meta(name: str, namespace: str | None = KUEUE_NAMESPACE) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {"app.kubernetes.io/name": "kueue"}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def _binding(
    kind: str, name: str, role_kind: str, role: str, namespace: str | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": kind,
        "metadata": _kueue_meta(name, namespace),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": KUEUE_SERVICE_ACCOUNT,
                "namespace": KUEUE_NAMESPACE,
            }
        ],
    }


def kueue_manifests(config: Path) -> list[dict[str, Any]]:
    """What config/default renders for Kueue's controller, but the Deployment (the
    harness makes its own pod) and the webhooks: namespace, RBAC, Services, config.

    kustomize is not at hand; its renames (namePrefix ``kueue-``, namespace
    ``kueue-system``) are done here on the same input files.
    """
    rbac = config / "rbac"
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": _kueue_meta(KUEUE_NAMESPACE, None)},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": _kueue_meta(KUEUE_SERVICE_ACCOUNT),
        },
    ]
    # The manager's ClusterRole, and the Roles for its leader election and its secret.
    for name, namespaced in (
        ("role.yaml", False),
        ("leader_election_role.yaml", True),
        ("manager_secrets_role.yaml", True),
    ):
        (role,) = _load_yaml(rbac / name)
        role["metadata"] = _kueue_meta(
            KUEUE_PREFIX + role["metadata"]["name"], KUEUE_NAMESPACE if namespaced else None
        )
        docs.append(role)
    docs += [
        _binding(
            "ClusterRoleBinding",
            f"{KUEUE_PREFIX}manager-rolebinding",
            "ClusterRole",
            f"{KUEUE_PREFIX}manager-role",
        ),
        _binding(
            "RoleBinding",
            f"{KUEUE_PREFIX}leader-election-rolebinding",
            "Role",
            f"{KUEUE_PREFIX}leader-election-role",
            KUEUE_NAMESPACE,
        ),
        _binding(
            "RoleBinding",
            f"{KUEUE_PREFIX}manager-secrets-rolebinding",
            "Role",
            f"{KUEUE_PREFIX}manager-secrets-role",
            KUEUE_NAMESPACE,
        ),
        # The visibility server is an extension API server: it reviews the callers'
        # tokens and rights (upstream binds the same rules as metrics-auth-role) and
        # reads the request-header CA (visibility/role_binding.yaml).
        _binding(
            "ClusterRoleBinding",
            f"{KUEUE_PREFIX}auth-delegator",
            "ClusterRole",
            "system:auth-delegator",
        ),
        _binding(
            "RoleBinding",
            f"{KUEUE_PREFIX}visibility-server-auth-reader",
            "Role",
            "extension-apiserver-authentication-reader",
            "kube-system",
        ),
        # Filled by Kueue's cert rotator, which may update it but not create it.
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _kueue_meta(KUEUE_CERT_SECRET),
            "type": "Opaque",
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": _kueue_meta(KUEUE_CONFIG_MAP),
            "data": {"controller_manager_config.yaml": kueue_configuration(config)},
        },
    ]
    for name, port in (
        (KUEUE_WEBHOOK_SERVICE, KUEUE_WEBHOOK_PORT),
        (KUEUE_VISIBILITY_SERVICE, KUEUE_VISIBILITY_PORT),
    ):
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": _kueue_meta(name),
                "spec": {
                    "selector": dict(KUEUE_LABELS),
                    "ports": [{"name": "https", "port": 443, "targetPort": port}],
                },
            }
        )
    return docs


def kueue_configuration(config: Path) -> str:
    """Upstream's controller_manager_config.yaml, changed for one replica in tests."""
    (cfg,) = _load_yaml(config / "manager" / "controller_manager_config.yaml")
    cfg.update(
        {
            # The default is the pod's own namespace, read from its service account.
            "namespace": KUEUE_NAMESPACE,
            "health": {"healthProbeBindAddress": f":{KUEUE_HEALTH_PORT}"},
            "metrics": {"bindAddress": "0"},  # nothing scrapes it
            "webhook": {"port": KUEUE_WEBHOOK_PORT},
            "leaderElection": {"leaderElect": False},  # one replica, started and stopped
            # Kueue makes its own CA and serving certificate, stores them in the
            # secret (mounted in its pod) and injects the CA into the webhook
            # configurations and conversion CRDs (these are the defaults, spelled out).
            "internalCertManagement": {
                "enable": True,
                "webhookServiceName": KUEUE_WEBHOOK_SERVICE,
                "webhookSecretName": KUEUE_CERT_SECRET,
            },
            # Only objects that name a LocalQueue are Kueue's.
            "manageJobsWithoutQueueName": False,
            "integrations": {"frameworks": list(KUEUE_FRAMEWORKS)},
        }
    )
    return yaml.safe_dump(cfg, sort_keys=False)


def _kueue_resources() -> set[str]:
    """The ray.io resources of KUEUE_FRAMEWORKS ("ray.io/raycluster" -> rayclusters)."""
    return {f"{framework.split('/', 1)[1]}s" for framework in KUEUE_FRAMEWORKS}


def kueue_webhook_configurations(config: Path) -> list[dict[str, Any]]:
    """Kueue's mutating and validating webhook configurations, with only the webhooks
    for its own kinds and the integrations enabled (KUEUE_FRAMEWORKS)."""
    wanted = _kueue_resources()
    docs = _load_yaml(config / "webhook" / "manifests.yaml")
    for doc in docs:
        # Names the cert rotator looks for: <service minus -webhook-service>-<type>-...
        doc["metadata"] = _kueue_meta(KUEUE_PREFIX + doc["metadata"]["name"], None)
        kept = []
        for hook in doc["webhooks"]:
            groups = {g for rule in hook["rules"] for g in rule["apiGroups"]}
            resources = {r.split("/")[0] for rule in hook["rules"] for r in rule["resources"]}
            if groups == {KUEUE_GROUP} or (groups == {"ray.io"} and resources <= wanted):
                service = hook["clientConfig"]["service"]
                service["name"] = KUEUE_PREFIX + service["name"]
                service["namespace"] = KUEUE_NAMESPACE
                kept.append(hook)
        doc["webhooks"] = kept
    return docs


def kueue_apiservices(config: Path) -> list[dict[str, Any]]:
    """The visibility API's APIServices (visibility.kueue.x-k8s.io v1beta1, v1beta2)."""
    docs = []
    for version in KUEUE_VISIBILITY_VERSIONS:
        (doc,) = _load_yaml(config / "visibility" / f"apiservice_{version}.yaml")
        doc["metadata"] = _kueue_meta(doc["metadata"]["name"], None)
        doc["spec"]["service"] = {"name": KUEUE_VISIBILITY_SERVICE, "namespace": KUEUE_NAMESPACE}
        docs.append(doc)
    return docs


def kueue_pod(binary: Path) -> dict[str, Any]:
    """Kueue's controller as a pod of the process node ``proc-cpu-0``: the binary is
    this machine's, seen by the pod through a hostPath volume (wherever the cache is)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": KUEUE_POD, "namespace": KUEUE_NAMESPACE, "labels": KUEUE_LABELS},
        "spec": {
            # Straight to the node: no scheduling round, and nothing to queue it.
            "nodeName": KUEUE_NODE,
            "tolerations": [{**processnodes.PROCESS_TAINT, "operator": "Equal"}],
            "serviceAccountName": KUEUE_SERVICE_ACCOUNT,
            "terminationGracePeriodSeconds": 10,
            "containers": [
                {
                    "name": "manager",
                    # Never pulled (a process node runs `command`): says what runs.
                    "image": f"registry.k8s.io/kueue/kueue:{kueue_version()}",
                    "command": [
                        f"{KUEUE_BINARY_MOUNT}/{binary.name}",
                        f"--config={KUEUE_CONFIG_MOUNT}/controller_manager_config.yaml",
                        "--zap-log-level=2",  # as upstream's Deployment
                    ],
                    "ports": [
                        {"name": "webhook-server", "containerPort": KUEUE_WEBHOOK_PORT},
                        {"name": "visibility", "containerPort": KUEUE_VISIBILITY_PORT},
                        {"name": "health", "containerPort": KUEUE_HEALTH_PORT},
                    ],
                    # Ready once its certificates exist and its webhook server listens.
                    # Probed every second (upstream: 10 s) so that start_kueue is quick.
                    "readinessProbe": {
                        "httpGet": {"path": "/readyz", "port": KUEUE_HEALTH_PORT},
                        "periodSeconds": 1,
                    },
                    "livenessProbe": {
                        "httpGet": {"path": "/healthz", "port": KUEUE_HEALTH_PORT},
                        "initialDelaySeconds": 15,
                        "periodSeconds": 20,
                    },
                    # Small: the node is shared with the tests' Ray pods.
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"memory": "1Gi"},
                    },
                    "volumeMounts": [
                        {"name": "kueue", "mountPath": KUEUE_BINARY_MOUNT, "readOnly": True},
                        {"name": "config", "mountPath": KUEUE_CONFIG_MOUNT, "readOnly": True},
                        # Kueue's cert rotator writes its certificate to the secret and
                        # waits for it here, as upstream (manager_webhook_patch.yaml).
                        {"name": "cert", "mountPath": KUEUE_CERT_DIR, "readOnly": True},
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "kueue",
                    "hostPath": {"path": str(binary.parent), "type": "Directory"},
                },
                {"name": "config", "configMap": {"name": KUEUE_CONFIG_MAP}},
                {"name": "cert", "secret": {"secretName": KUEUE_CERT_SECRET}},
            ],
        },
    }


def _conditions(obj: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in obj.get("status", {}).get("conditions") or []}


# ---------------------------------------------------------------------- control plane


class ControlPlane:
    """etcd, apiserver, controller-manager, scheduler, KWOK and KubeRay on loopback."""

    def __init__(self, work_dir: Path | None = None, binaries: Binaries | None = None) -> None:
        self._binaries = binaries
        self._given_work_dir = work_dir
        self.work_dir: Path = work_dir or Path()
        self.server_url = ""
        self._procs: dict[str, _Process] = {}
        self._tokens: dict[str, str] = {}
        self._ports: dict[str, int] = {}
        self._started = False
        self._cgroup: Path | None = None
        self.process_nodes_unavailable: str | None = "not started"
        self._kueue_running = False

    # ---- public paths

    @property
    def binaries(self) -> Binaries:
        """The binaries it runs (and ``helm``, for the chart's tests)."""
        return self._binaries or Binaries.locate()

    @property
    def log_dir(self) -> Path:
        return self.work_dir / "logs"

    @property
    def ca_file(self) -> Path:
        return self.work_dir / "pki" / "ca.crt"

    def kubeconfig(self, user: str = "admin") -> Path:
        """Kubeconfig of ``admin``, ``alice`` or ``bob``: token, CA-verified TLS."""
        if user not in USERS:
            raise ValueError(f"unknown user {user!r}; expected one of {USERS}")
        return self.work_dir / "kubeconfig" / f"{user}.yaml"

    def token(self, user: str) -> str:
        return self._tokens[user]

    def api_client(self, user: str = "admin") -> k8s_client.ApiClient:
        """A new client for ``user``; close it (or use it in ``with``) when done."""
        # The loader is untyped; it does return an ApiClient.
        load = cast(Callable[..., k8s_client.ApiClient], k8s_config.new_client_from_config)
        return load(config_file=str(self.kubeconfig(user)), persist_config=False)

    # ---- lifecycle

    def start(self) -> None:
        if self._started:
            raise ControlPlaneError("already started")
        t0 = time.monotonic()
        binaries = self._binaries or Binaries.locate()
        if missing := binaries.missing():
            raise ControlPlaneError(
                f"missing binaries {[str(p) for p in missing]}: run {BUILD_SCRIPT}"
            )
        if shutil.which("openssl") is None:
            raise ControlPlaneError("the openssl CLI is needed to make the test certificates")
        self._binaries = binaries
        if self._given_work_dir is None:
            self.work_dir = Path(tempfile.mkdtemp(prefix="raylab-k8s-"))
        elif self.work_dir.exists() and any(self.work_dir.iterdir()):
            # Old etcd data would hold old nodes, tokens and certs: start from nothing.
            raise ControlPlaneError(f"work dir {self.work_dir} is not empty")
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(exist_ok=True)
        self._started = True
        try:
            self._prepare_files()
            self._phase("etcd", self._start_etcd)
            self._phase("kube-apiserver", self.start_apiserver)
            self._phase("KubeRay CRDs", self.install_crds)
            self._phase("fake nodes", self._create_nodes)
            self._phase("controllers", self._start_controllers)
            self._phase("ready", self._wait_ready)
        except Exception as exc:
            self.stop(keep_work_dir=True)
            raise ControlPlaneError(f"{exc}\n(logs in {self.log_dir})") from exc
        except BaseException:  # Ctrl-C: clean up, nothing to explain
            self.stop(keep_work_dir=True)
            raise
        log.info(
            "control plane up in %.1fs at %s (logs: %s)",
            time.monotonic() - t0,
            self.server_url,
            self.log_dir,
        )

    def stop(self, keep_work_dir: bool = False, timeout: float = 15.0) -> None:
        """Stop every process (whole process groups) and verify that none is left.

        The work dir (etcd data, certs, kubeconfigs, logs) is removed unless
        ``keep_work_dir`` or the caller supplied it.
        """
        procs, self._procs = self._procs, {}
        # Clients first, then the apiserver, then etcd: an apiserver whose etcd is gone
        # stalls in its graceful shutdown.
        servers = ("kube-apiserver", "etcd")
        tiers = [[p for name, p in procs.items() if name not in servers]]
        tiers += [[procs[name]] for name in servers if name in procs]
        leftovers: list[str] = []
        for tier in tiers:
            leftovers += self._signal_and_reap(tier, timeout)
        if self._cgroup is not None:
            processnodes.remove_cgroup_tree(self._cgroup)
            self._cgroup = None
        if leftovers:
            raise ControlPlaneError(f"processes left behind: {leftovers}")
        if self._started and not keep_work_dir and self._given_work_dir is None:
            shutil.rmtree(self.work_dir, ignore_errors=True)
        self._started = False
        self._kueue_running = False  # its pod went with procnode

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop_apiserver(self, graceful: bool = True) -> None:
        """Take the apiserver down (SIGTERM, or SIGKILL if not ``graceful``).

        Everything else keeps running and reconnects after ``start_apiserver()``, which
        restarts the controller-manager (see there).
        Outages of up to about 2 minutes leave pods Ready (see NODE_MONITOR_GRACE).
        """
        self._stop("kube-apiserver", timeout=30.0, graceful=graceful)

    def stop_operator(self) -> None:
        """Stop the KubeRay operator: new RayClusters get no status and no pods until
        ``start_operator()``; pods it made before keep running (KWOK keeps them Ready)."""
        self._stop("ray-operator", timeout=15.0)

    def _stop(self, name: str, timeout: float, graceful: bool = True) -> None:
        """Stop one component (its whole process group) and check that nothing is left."""
        proc = self._procs.pop(name, None)
        if proc is None:
            raise ControlPlaneError(f"{name} is not running")
        if not graceful:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
        if self._signal_and_reap([proc], timeout):
            raise ControlPlaneError(f"{name} survived SIGKILL")

    def start_operator(self) -> None:
        """(Re)start the KubeRay operator and wait until it is ready; it then reconciles
        every RayCluster, including those made while it was away.

        Call it (like ``start_apiserver``) from a thread that lives as long as the
        control plane, such as the main one: the kernel stops a component when the
        thread that started it ends (``_die_with_parent``).
        """
        if "ray-operator" in self._procs:
            raise ControlPlaneError("ray-operator is already running")
        self._spawn_operator()
        self._wait_operator()

    def start_apiserver(self) -> None:
        """(Re)start the apiserver: same port, certificates, tokens and etcd; on a restart,
        also the controller-manager, whose view would be stale for up to a minute.

        From a long-lived thread, as ``start_operator``."""
        if "kube-apiserver" in self._procs:
            raise ControlPlaneError("kube-apiserver is already running")
        assert self._binaries is not None
        p = self._ports
        pki = self.work_dir / "pki"
        self._spawn(
            "kube-apiserver",
            [
                str(self._binaries.kube_apiserver),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--cert-dir={self.work_dir / 'kube-apiserver'}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--allow-privileged=true",
                f"--service-account-issuer={SA_ISSUER}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--authorization-mode=Node,RBAC",
                f"--token-auth-file={self.work_dir / 'tokens.csv'}",
                # Logs, exec and port-forward of process-node pods go through the API
                # server to procnode's kubelet API, verified both ways.
                f"--kubelet-client-certificate={pki / 'kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'kubelet-client.key'}",
                f"--kubelet-certificate-authority={self.ca_file}",
                # Node names do not resolve here; the nodes' InternalIP is 127.0.0.1.
                "--kubelet-preferred-address-types=InternalIP",
                f"--audit-policy-file={self.work_dir / 'audit-policy.yaml'}",
                f"--audit-log-path={self.audit_log}",
                "--profiling=false",
                # Endpoints may not hold 127.0.0.1: leave the "kubernetes" Service
                # without any instead of logging a failed update every 10 s.
                "--endpoint-reconciler-type=none",
                # Close open watches on SIGTERM: otherwise a graceful stop waits for
                # them (the controllers' watches) for over 30 s.
                "--shutdown-watch-termination-grace-period=2s",
                # Webhooks, CRD conversion and aggregated APIs (Kueue's) are reached at
                # a ready endpoint of their Service (buildServiceResolver in
                # cmd/kube-apiserver hands the same resolver to all three), not at its
                # ClusterIP: there is no kube-proxy, and pod IPs are reachable.
                "--enable-aggregator-routing=true",
                # The aggregation layer (see _make_pki).
                f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
                f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            ],
        )
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        wait_until(
            "kube-apiserver /readyz",
            lambda: _http_ok(f"{self.server_url}/readyz", ctx),
            timeout=120,
            check=self._check_alive,
        )
        if "kube-controller-manager" in self._procs:
            # A restart: the controller-manager's informers would reconnect only after
            # client-go's backoff (up to ~60 s after a 30 s outage), and meanwhile its
            # garbage collector and ServiceAccount controller act on a stale view (a
            # foreground delete removed a RayCluster before its new pods; a namespace got
            # no default ServiceAccount for 30 s). A new one starts from a fresh list.
            self._stop("kube-controller-manager", timeout=15.0)
            self._spawn_controller_manager()
            self._wait_healthy("controller-manager")

    # ---- CRDs

    @property
    def audit_log(self) -> Path:
        return self.work_dir / "audit.log"

    def audited_requests(self, user: str, since: float = 0.0) -> list[dict[str, Any]]:
        """Requests `user` made (one audit event each, at ResponseComplete or, for a
        watch, ResponseStarted), received at or after the epoch time `since`."""
        events = []
        try:
            lines = self.audit_log.read_text().splitlines()
        except OSError:
            return []
        for line in lines:
            event = json.loads(line)
            if event.get("user", {}).get("username") != user:
                continue
            if event.get("stage") not in ("ResponseComplete", "ResponseStarted"):
                continue
            if event.get("stage") == "ResponseComplete" and event.get("verb") == "watch":
                continue  # the same watch, ending
            received = datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()
            if received >= since:
                events.append(event)
        return events

    def install_crds(self, timeout: float = 60.0) -> None:
        """Create the KubeRay CRDs (if absent) and wait until they are Established.

        The YAML goes to the apiserver as is: parsing it and passing it through the
        client's models would cost seconds, and a plain create is several times faster
        than server-side apply on these megabyte objects (client-side apply fails).
        """
        assert self._binaries is not None
        names = []
        for path in self._binaries.crds:
            names.append(_crd_name(path))
            # Already there (installed before): same files, same version.
            with contextlib.suppress(FileExistsError):
                self._admin_request("POST", _CRD_PATH, path.read_bytes(), "application/yaml")

        def established(name: str) -> bool:
            crd = self._admin_request("GET", f"{_CRD_PATH}/{name}")
            conditions = crd.get("status", {}).get("conditions") or []
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        for name in names:
            wait_until(f"CRD {name} Established", partial(established, name), timeout)

    def uninstall_crds(self, timeout: float = 60.0) -> None:
        """Delete the KubeRay CRDs, and so every Ray object.

        The operator logs errors until they come back. After a reinstall the garbage
        collector only notices them at its next discovery resync (about 30 s).
        """
        assert self._binaries is not None
        names = [_crd_name(path) for path in self._binaries.crds]
        # The API paths each CRD serves: they answer a little after the CRD object is
        # gone (the apiserver serves them from its own cache of CRDs), and "not installed"
        # is what a client sees on those paths.
        served: list[str] = []
        for name in names:
            with contextlib.suppress(FileNotFoundError):
                crd = self._admin_request("GET", f"{_CRD_PATH}/{name}")
                group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
                served += [f"/apis/{group}/{v['name']}/{plural}" for v in crd["spec"]["versions"]]
                self._admin_request("DELETE", f"{_CRD_PATH}/{name}")

        def gone(path: str) -> bool:
            try:
                self._admin_request("GET", path)
            except FileNotFoundError:
                return True
            return False

        for path in [f"{_CRD_PATH}/{name}" for name in names] + served:
            wait_until(f"{path} gone", partial(gone, path), timeout)

    # ---- Kueue (only for the tests that ask for it)

    @property
    def kueue_running(self) -> bool:
        """Between ``start_kueue()`` and ``stop_kueue()``."""
        return self._kueue_running

    def start_kueue(self, timeout: float = 180.0) -> float:
        """Start the real Kueue controller and wait until it is ready; the seconds taken.

        What config/default installs (CRDs, RBAC, Services, webhook configurations, the
        visibility APIService), with the controller as a pod of the process node
        ``proc-cpu-0`` (kueue_pod). Ready means: the pod is Ready (certificates made,
        webhook server listening), the API server gets answers from its webhooks (a
        dry-run create of a ResourceFlavor and of a RayCluster passes them), and the
        visibility API (``visibility.kueue.x-k8s.io``) is Available.

        Not part of ``start()``: while Kueue runs, every RayCluster or RayJob created
        anywhere goes through its webhooks. Needs the process nodes. From a thread
        that outlives it, as ``start_operator``.
        """
        if self._kueue_running:
            raise ControlPlaneError("Kueue is already running")
        if self.process_nodes_unavailable is not None:
            raise ControlPlaneError(
                "Kueue runs as a pod of a process node, and there are none here: "
                f"{self.process_nodes_unavailable}"
            )
        assert self._binaries is not None
        binaries = self._binaries
        t0 = time.monotonic()

        def left() -> float:
            return max(1.0, timeout - (time.monotonic() - t0))

        self._kueue_running = True  # from here on stop_kueue() has something to undo
        try:
            self._phase("Kueue CRDs", lambda: self.install_kueue_crds(left()))
            for doc in kueue_manifests(binaries.kueue_config):
                self._apply(doc)
            # Before the pod: its cert rotator injects the CA into these as it starts.
            for doc in kueue_webhook_configurations(binaries.kueue_config):
                self._apply(doc)
            self._phase("Kueue pod", lambda: self._start_kueue_pod(left()))
            for doc in kueue_apiservices(binaries.kueue_config):
                self._apply(doc)
            self._phase("Kueue webhooks", lambda: self._wait_kueue_webhooks(left()))
            self._phase("Kueue visibility", lambda: self._wait_kueue_visibility(left()))
        except Exception as exc:
            detail = self._kueue_diagnosis()
            try:
                self.stop_kueue()
            except Exception as cleanup:  # the first error is the one to report
                log.warning("stopping Kueue after its failed start: %s", cleanup)
            raise ControlPlaneError(
                f"Kueue did not start: {exc}\n{detail}\n(logs in {self.log_dir})"
            ) from exc
        elapsed = time.monotonic() - t0
        log.info("Kueue %s up in %.1fs", kueue_version(), elapsed)
        return elapsed

    def stop_kueue(self, timeout: float = 60.0) -> None:
        """Stop Kueue, leaving the cluster as if it had never run, but for its CRDs,
        its objects and its namespace (kept for the next ``start_kueue()``).

        First the webhook configurations and the visibility APIServices go, so that the
        API server calls Kueue no more (an unavailable aggregated API would also hold up
        namespace deletion); then its pod (its log is appended to ``kueue.log`` in the
        log folder); then Kueue's finalizers, so that deleting a Workload, a queue or
        a namespace later waits for no Kueue. A no-op when Kueue is not running.
        """
        if not self._kueue_running:
            return
        assert self._binaries is not None
        t0 = time.monotonic()
        config = self._binaries.kueue_config
        for doc in [*kueue_webhook_configurations(config), *kueue_apiservices(config)]:
            with contextlib.suppress(FileNotFoundError):
                self._admin_request("DELETE", _object_path(doc))
        self._save_kueue_log()
        self._delete_kueue_pod(timeout)
        self._lift_kueue_finalizers()
        self._kueue_running = False
        log.info("Kueue stopped in %.1fs", time.monotonic() - t0)

    def install_kueue_crds(self, timeout: float = 60.0) -> None:
        """Create Kueue's CRDs (if absent; they stay after ``stop_kueue``), with the
        conversion webhook of those that have one, and wait until they are Established."""
        assert self._binaries is not None
        names = []
        created = False
        for path in self._binaries.kueue_crds:
            name = _crd_name(path)
            names.append(name)
            with contextlib.suppress(FileExistsError):
                # As install_crds: the YAML as is (megabytes; parsing it costs seconds).
                self._admin_request("POST", _CRD_PATH, path.read_bytes(), "application/yaml")
                created = True
            if name.split(".", 1)[0] in KUEUE_CONVERSION_CRDS:
                # config/components/crd/patches/webhook_in_*.yaml. A merge patch keeps
                # the CA bundle Kueue injected when it last ran.
                conversion = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {
                            "service": {
                                "namespace": KUEUE_NAMESPACE,
                                "name": KUEUE_WEBHOOK_SERVICE,
                                "path": "/convert",
                            }
                        },
                        "conversionReviewVersions": ["v1"],
                    },
                }
                self._admin_request(
                    "PATCH",
                    f"{_CRD_PATH}/{name}",
                    json.dumps({"spec": {"conversion": conversion}}).encode(),
                    "application/merge-patch+json",
                )

        def established(name: str) -> bool:
            crd = self._admin_request("GET", f"{_CRD_PATH}/{name}")
            return _conditions(crd).get("Established") == "True"

        for name in names:
            wait_until(f"CRD {name} Established", partial(established, name), timeout)
        if created and "kube-controller-manager" in self._procs:
            # The garbage collector learns of new kinds only at its discovery resync,
            # every 30 s: until then a deleted RayCluster's Workload stays, and holds
            # its quota. A new controller-manager knows them from the start.
            self._stop("kube-controller-manager", timeout=15.0)
            self._spawn_controller_manager()
            self._wait_healthy("controller-manager")

    def kueue_log(self, lines: int = 40, previous: bool = False) -> str:
        """The last ``lines`` lines of Kueue's log (of its previous container if
        ``previous``), as procnode keeps it and the API serves it."""
        path = f"/api/v1/namespaces/{KUEUE_NAMESPACE}/pods/{KUEUE_POD}/log?container=manager"
        path += f"&tailLines={lines}" if lines else ""
        path += "&previous=true" if previous else ""
        data: bytes = self._admin_request("GET", path, raw=True, timeout=15)
        return data.decode(errors="replace")

    def _apply(self, doc: dict[str, Any]) -> None:
        """Server-side apply: creates, or brings to ``doc`` what the harness set
        before, leaving alone what others set (Kueue's CA bundles and certificates)."""
        query = f"?fieldManager={_MANAGER}&force=true"
        body = json.dumps(doc).encode()  # JSON is YAML
        self._admin_request(
            "PATCH", _object_path(doc) + query, body, "application/apply-patch+yaml"
        )

    def _kueue_pod_path(self) -> str:
        return f"/api/v1/namespaces/{KUEUE_NAMESPACE}/pods/{KUEUE_POD}"

    def _start_kueue_pod(self, timeout: float) -> None:
        assert self._binaries is not None
        # A leftover (a start that failed before its cleanup): pods cannot be updated.
        self._delete_kueue_pod(timeout)
        pod = kueue_pod(self._binaries.kueue)
        secret = f"/api/v1/namespaces/{KUEUE_NAMESPACE}/secrets/{KUEUE_CERT_SECRET}"

        def certificate() -> bool:
            return "tls.crt" in (self._admin_request("GET", secret).get("data") or {})

        had_certificate = certificate()
        self._admin_request("POST", _object_path(pod, named=False), json.dumps(pod).encode())
        if not had_certificate:
            # Kueue's first run writes its certificate to the secret and then waits for
            # it in the secret's volume; a kubelet would update the volume within a
            # minute or two, procnode writes volumes only when a pod starts. So a new
            # pod, which has it from the start (as every later start_kueue).
            wait_until(
                "Kueue's certificate in its secret",
                certificate,
                timeout,
                0.25,
                self._check_kueue_pod,
            )
            self._delete_kueue_pod(timeout, grace=1)  # it ignores SIGTERM until then
            self._admin_request("POST", _object_path(pod, named=False), json.dumps(pod).encode())

        def ready() -> bool:
            return (
                _conditions(self._admin_request("GET", self._kueue_pod_path())).get("Ready")
                == "True"
            )

        wait_until("Kueue's pod Ready", ready, timeout, 0.5, self._check_kueue_pod)

    def _check_kueue_pod(self) -> None:
        """Gives up on a Kueue that exited or cannot start (say why)."""
        self._check_alive()
        with contextlib.suppress(FileNotFoundError):
            pod = self._admin_request("GET", self._kueue_pod_path())
            for status in pod.get("status", {}).get("containerStatuses") or []:
                state = status.get("state") or {}
                waiting = (state.get("waiting") or {}).get("reason")
                if (
                    status.get("restartCount", 0) > 0
                    or "terminated" in state
                    or waiting not in (None, "ContainerCreating", "PodInitializing")
                ):
                    last = status.get("lastState") or state
                    raise ControlPlaneError(f"Kueue's container failed: {json.dumps(last)}")

    def _wait_kueue_webhooks(self, timeout: float) -> None:
        # Dry runs go through every admission webhook; these fail until the API server
        # reaches Kueue at its endpoint and trusts the CA injected into the configurations.
        flavor = {
            "apiVersion": f"{KUEUE_GROUP}/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "raylab-harness-probe"},
        }
        cluster = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "raylab-harness-probe"},
            "spec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}
                    },
                }
            },
        }
        probes = (
            (f"/apis/{KUEUE_GROUP}/v1beta2/resourceflavors", flavor),
            ("/apis/ray.io/v1/namespaces/default/rayclusters", cluster),
        )
        for path, body in probes:
            wait_until(
                f"Kueue's webhooks to admit a dry-run {body['kind']}",
                partial(
                    self._admin_request, "POST", path + "?dryRun=All", json.dumps(body).encode()
                ),
                timeout,
                0.5,
                self._check_kueue_pod,
            )

    def _wait_kueue_visibility(self, timeout: float) -> None:
        assert self._binaries is not None
        for doc in kueue_apiservices(self._binaries.kueue_config):
            path = _object_path(doc)

            def available(path: str = path) -> bool:
                return _conditions(self._admin_request("GET", path)).get("Available") == "True"

            wait_until(
                f"APIService {doc['metadata']['name']} Available",
                available,
                timeout,
                0.5,
                self._check_kueue_pod,
            )

    def _kueue_diagnosis(self) -> str:
        """What Kueue's pod says (status, then its log's tail), for error messages."""
        try:
            pod = self._admin_request("GET", self._kueue_pod_path())
        except (FileNotFoundError, ControlPlaneError, OSError) as exc:
            return f"(no pod: {exc})"
        status = pod.get("status", {})
        text = [f"pod {KUEUE_POD}: phase {status.get('phase')}, conditions {_conditions(pod)}"]
        restarted = any(s.get("restartCount") for s in status.get("containerStatuses") or [])
        for previous in (True, False) if restarted else (False,):
            try:
                tail = self.kueue_log(40, previous=previous)
            except (FileNotFoundError, ControlPlaneError, OSError) as exc:
                tail = f"(no log: {exc})"
            which = "previous container" if previous else "container"
            text.append(f"last lines of Kueue's log ({which}):\n{tail}")
        return "\n".join(text)

    def _save_kueue_log(self) -> None:
        try:
            text = self.kueue_log(lines=0)
        except (FileNotFoundError, ControlPlaneError, OSError):
            return
        with (self.log_dir / "kueue.log").open("a") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} pod {KUEUE_POD}\n{text}")

    def _delete_kueue_pod(self, timeout: float, grace: int | None = None) -> None:
        path = self._kueue_pod_path()

        def gone() -> bool:
            try:
                self._admin_request("GET", path)
            except FileNotFoundError:
                return True
            return False

        for seconds in (grace, 0):  # gracefully (SIGTERM, 10 s by default), else at once
            query = "" if seconds is None else f"?gracePeriodSeconds={seconds}"
            try:
                self._admin_request("DELETE", path + query)
            except FileNotFoundError:
                return
            try:
                wait_until(f"pod {KUEUE_POD} gone", gone, timeout, 0.25)
                return
            except TimeoutError:
                log.warning("Kueue's pod did not go within %.0fs; deleting it at once", timeout)
        raise ControlPlaneError(f"Kueue's pod {KUEUE_NAMESPACE}/{KUEUE_POD} did not go")

    def _lift_kueue_finalizers(self) -> None:
        # Kueue removes its finalizers from what is deleted; with Kueue gone they would
        # hold Workloads, queues, flavors and their namespaces forever. It adds them
        # back to what it still manages when it starts again.
        for plural in KUEUE_FINALIZED:
            items = self._admin_request("GET", f"/apis/{KUEUE_GROUP}/v1beta2/{plural}")["items"]
            for item in items:
                meta = item["metadata"]
                finalizers = meta.get("finalizers") or []
                kept = [f for f in finalizers if not f.startswith(f"{KUEUE_GROUP}/")]
                if kept == finalizers:
                    continue
                path = f"/apis/{KUEUE_GROUP}/v1beta2"
                if "namespace" in meta:
                    path += f"/namespaces/{meta['namespace']}"
                # resourceVersion: a conflict (someone else changed it) is an error.
                patch = {
                    "metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}
                }
                with contextlib.suppress(FileNotFoundError):
                    self._admin_request(
                        "PATCH",
                        f"{path}/{plural}/{meta['name']}",
                        json.dumps(patch).encode(),
                        "application/merge-patch+json",
                    )

    def _admin_request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        content_type: str = "application/json",
        raw: bool = False,
        timeout: float = 60.0,
    ) -> Any:
        """A raw API request as admin: the decoded JSON, or the bytes if ``raw``.

        Raises FileNotFoundError for 404, FileExistsError for 409, else ControlPlaneError.
        """
        request = urllib.request.Request(
            self.server_url + path,
            data=body,
            method=method,
            headers={
                "Authorization": f"Bearer {self._tokens['admin']}",
                "Content-Type": content_type,
                "Accept": "application/json",
            },
        )
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        try:
            with urllib.request.urlopen(request, context=ctx, timeout=timeout) as response:
                data = response.read()
                return data if raw else json.loads(data)
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            if exc.code == HTTPStatus.NOT_FOUND:
                raise FileNotFoundError(f"{method} {path}: {detail}") from exc
            if exc.code == HTTPStatus.CONFLICT:
                raise FileExistsError(f"{method} {path}: {detail}") from exc
            raise ControlPlaneError(f"{method} {path}: {exc.code} {detail}") from exc

    # ---- internals: setup

    def _phase(self, what: str, step: Callable[[], None]) -> None:
        t = time.monotonic()
        step()
        log.info("  %-15s %.1fs", what, time.monotonic() - t)

    def _prepare_files(self) -> None:
        names = (
            "etcd",
            "etcd-peer",
            "apiserver",
            "controller-manager",
            "scheduler",
            "operator",
            *(f"procnode-{n.name}" for n in processnodes.PROCESS_NODES),
        )
        self._ports = dict(zip(names, _free_ports(len(names)), strict=True))
        self.server_url = f"https://127.0.0.1:{self._ports['apiserver']}"
        self._make_pki(self.work_dir / "pki")
        self._tokens = {user: secrets.token_urlsafe(24) for user in USERS}
        # token,user,uid[,"groups"]: only admin has a group (system:masters).
        rows = [f'{self._tokens["admin"]},admin,uid-admin,"system:masters"']
        rows += [f"{self._tokens[u]},{u},uid-{u}" for u in USERS if u != "admin"]
        (self.work_dir / "tokens.csv").write_text("\n".join(rows) + "\n")
        # Audit what the ordinary users (the ones raylab runs as in tests) ask of the API
        # server: benchmarks count requests on the server's side from this log.
        (self.work_dir / "audit-policy.yaml").write_text(
            "apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
            "rules:\n- level: Metadata\n  users: [alice, bob]\n- level: None\n"
        )
        (self.work_dir / "kubeconfig").mkdir(exist_ok=True)
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        for user in USERS:
            doc = {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "raylab",
                        "cluster": {
                            "server": self.server_url,
                            "certificate-authority-data": ca_data,
                        },
                    }
                ],
                "users": [{"name": user, "user": {"token": self._tokens[user]}}],
                "contexts": [
                    {
                        "name": f"raylab-{user}",
                        "context": {
                            "cluster": "raylab",
                            "user": user,
                            "namespace": "default",
                        },
                    }
                ],
                "current-context": f"raylab-{user}",
            }
            path = self.kubeconfig(user)
            path.write_text(yaml.safe_dump(doc, sort_keys=False))
            path.chmod(0o600)

    def _make_pki(self, pki: Path) -> None:
        pki.mkdir(parents=True, exist_ok=True)
        # P-256 keys: as good as RSA here and generated in milliseconds.
        ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        _openssl(
            f"req -x509 {ec} -keyout ca.key -out ca.crt -days 3650"
            " -subj /CN=raylab-test-ca"
            " -addext basicConstraints=critical,CA:TRUE"
            " -addext keyUsage=critical,keyCertSign,cRLSign",
            pki,
        )
        _openssl(
            f"req {ec} -keyout apiserver.key -out apiserver.csr -subj /CN=apiserver",
            pki,
        )
        sans = [
            "IP:127.0.0.1",
            "IP:10.96.0.1",  # ClusterIP of the "kubernetes" Service
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            "DNS:kubernetes.default.svc.cluster.local",
        ]
        # Key identifiers and key usages keep strict verifiers (Python 3.13+) happy.
        (pki / "apiserver.ext").write_text(
            f"subjectAltName={','.join(sans)}\n"
            "basicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\n"
            "authorityKeyIdentifier=keyid,issuer\n"
        )
        _openssl(
            "x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
            " -out apiserver.crt -days 3650 -extfile apiserver.ext",
            pki,
        )
        # The process nodes' kubelet API and the API server's client certificate for it:
        # mutual TLS is how either side knows the other (as with real kubelets).
        _openssl(f"req {ec} -keyout procnode.key -out procnode.csr -subj /CN=procnode", pki)
        (pki / "procnode.ext").write_text(
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n"
            "keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n"
            "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
        )
        _openssl(
            "x509 -req -in procnode.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
            " -out procnode.crt -days 3650 -extfile procnode.ext",
            pki,
        )
        _openssl(
            f"req {ec} -keyout kubelet-client.key -out kubelet-client.csr"
            " -subj /O=system:masters/CN=kube-apiserver-kubelet-client",
            pki,
        )
        (pki / "kubelet-client.ext").write_text(
            "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
            "extendedKeyUsage=clientAuth\n"
        )
        _openssl(
            "x509 -req -in kubelet-client.csr -CA ca.crt -CAkey ca.key -CAcreateserial"
            " -out kubelet-client.crt -days 3650 -extfile kubelet-client.ext",
            pki,
        )
        # The aggregation layer (Kueue's visibility API): the API server proxies to an
        # extension API server with this client certificate and the user in
        # X-Remote-* headers, which the extension trusts only from a certificate of
        # this CA with this name. A CA of its own, as kubeadm makes: the test CA's
        # client certificates must not be able to assert users this way.
        _openssl(
            f"req -x509 {ec} -keyout front-proxy-ca.key -out front-proxy-ca.crt -days 3650"
            " -subj /CN=raylab-front-proxy-ca"
            " -addext basicConstraints=critical,CA:TRUE"
            " -addext keyUsage=critical,keyCertSign,cRLSign",
            pki,
        )
        _openssl(
            f"req {ec} -keyout front-proxy-client.key -out front-proxy-client.csr"
            f" -subj /CN={FRONT_PROXY_CLIENT}",
            pki,
        )
        _openssl(
            "x509 -req -in front-proxy-client.csr -CA front-proxy-ca.crt"
            " -CAkey front-proxy-ca.key -CAcreateserial -out front-proxy-client.crt"
            " -days 3650 -extfile kubelet-client.ext",  # the same: a client certificate
            pki,
        )
        # Service-account token signing keys (apiserver and controller-manager).
        _openssl("genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out sa.key", pki)
        _openssl("pkey -in sa.key -pubout -out sa.pub", pki)

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        run_dir = self.work_dir / name
        run_dir.mkdir(exist_ok=True)  # cwd, so stray relative writes stay in the work dir
        log_path = self.log_dir / f"{name}.log"
        with log_path.open("ab") as out:
            out.write(f"\n==== {time.strftime('%H:%M:%S')} {' '.join(argv)}\n".encode())
            out.flush()
            popen = subprocess.Popen(
                argv,
                cwd=run_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, **(env or {})},
                start_new_session=True,  # own process group: stop() kills it whole
                preexec_fn=_die_with_parent,  # only calls prctl, looked up beforehand
            )
        self._procs[name] = _Process(name, log_path, popen)

    def _check_alive(self) -> None:
        for proc in self._procs.values():
            if not proc.alive:
                raise ControlPlaneError(
                    f"{proc.name} exited with {proc.popen.returncode}; "
                    f"last lines of {proc.log_path}:\n{_tail(proc.log_path)}"
                )

    def _start_etcd(self) -> None:
        assert self._binaries is not None
        client = f"http://127.0.0.1:{self._ports['etcd']}"
        peer = f"http://127.0.0.1:{self._ports['etcd-peer']}"
        self._spawn(
            "etcd",
            [
                str(self._binaries.etcd),
                "--name=raylab",
                f"--data-dir={self.work_dir / 'etcd' / 'data'}",
                f"--listen-client-urls={client}",
                f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=raylab={peer}",
                "--unsafe-no-fsync",  # throwaway data: fsync only slows tests down
                "--log-level=warn",
            ],
        )
        wait_until(
            "etcd /health",
            lambda: _http_ok(f"{client}/health"),
            30,
            check=self._check_alive,
        )

    def _create_nodes(self) -> None:
        with self.api_client() as api:
            core = k8s_client.CoreV1Api(api)
            for node in FAKE_NODES:
                call_json(core.create_node, node.manifest())

    def _delegated(self) -> list[str]:
        """Flags the controller-manager and the scheduler share."""
        admin = str(self.kubeconfig("admin"))
        # Components run as admin: simpler than one identity each, and irrelevant to
        # what the tests check (the RBAC of ordinary users).
        return [
            f"--kubeconfig={admin}",
            f"--authentication-kubeconfig={admin}",
            f"--authorization-kubeconfig={admin}",
            # No client CA is configured, so there is nothing to look up (saves errors).
            "--authentication-skip-lookup=true",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
        ]

    def _spawn_controller_manager(self) -> None:
        assert self._binaries is not None
        pki = self.work_dir / "pki"
        self._spawn(
            "kube-controller-manager",
            [
                str(self._binaries.kube_controller_manager),
                *self._delegated(),
                f"--secure-port={self._ports['controller-manager']}",
                f"--cert-dir={self.work_dir / 'kube-controller-manager'}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={self.ca_file}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Nodes count as lost after 3 min without a heartbeat instead of 50 s, so an
                # apiserver outage (stop_apiserver) of up to ~2 min is survived: after a
                # longer one the node controller marks every pod NotReady, and KWOK, unlike
                # a kubelet, never marks a pod Ready twice.
                f"--node-monitor-grace-period={NODE_MONITOR_GRACE}",
                # Its default is under /usr/libexec, which it would otherwise create.
                f"--flex-volume-plugin-dir={self.work_dir / 'kube-controller-manager'}",
            ],
        )

    def _start_controllers(self) -> None:
        assert self._binaries is not None
        admin = str(self.kubeconfig("admin"))
        self._spawn_controller_manager()
        self._spawn(
            "kube-scheduler",
            [
                str(self._binaries.kube_scheduler),
                *self._delegated(),
                f"--secure-port={self._ports['scheduler']}",
                f"--cert-dir={self.work_dir / 'kube-scheduler'}",
            ],
        )
        kwok_home = self.work_dir / "kwok"
        kwok_home.mkdir(exist_ok=True)
        self._spawn(
            "kwok",
            [
                str(self._binaries.kwok),
                f"--kubeconfig={admin}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-annotation-selector={'='.join(KWOK_NODE_ANNOTATION)}",
                f"--cidr={POD_CIDR}",
                "--node-ip=10.0.0.1",
                # Without a config file the lease duration is 0: no node Leases and a
                # status heartbeat only every ~10 min, so the node lifecycle controller
                # (50 s grace) keeps tainting the nodes unreachable. With it: Leases
                # renewed every 10 s and status heartbeats every 20-45 s.
                f"--node-lease-duration-seconds={NODE_LEASE_SECONDS}",
            ],
            # kwok also reads ~/.kwok/kwok.yaml: keep a developer's own config out.
            env={"HOME": str(kwok_home)},
        )
        self._spawn_operator()
        self.process_nodes_unavailable = processnodes.unavailable_reason()
        if self.process_nodes_unavailable is None:
            self._spawn_procnode()
        else:
            log.warning("no process nodes: %s", self.process_nodes_unavailable)

    def _spawn_procnode(self) -> None:
        assert self._binaries is not None
        run_dir = self.work_dir / "procnode"
        run_dir.mkdir(exist_ok=True)
        # Per control plane, so two test sessions on one machine never share one.
        self._cgroup = processnodes.memory_cgroup_parent(f"raylab-procnode-{os.getpid()}")
        config = run_dir / "config.json"
        processnodes.write_config(
            config,
            kubeconfig=self.kubeconfig("admin"),
            state_dir=run_dir / "state",
            binary=self._binaries.procnode,
            apiserver=f"127.0.0.1:{self._ports['apiserver']}",
            pki=self.work_dir / "pki",
            ports=[self._ports[f"procnode-{n.name}"] for n in processnodes.PROCESS_NODES],
            cgroup_parent=self._cgroup,
        )
        self._spawn("procnode", [str(self._binaries.procnode), "run", str(config)])

    @property
    def process_nodes(self) -> list[str]:
        """Names of the nodes whose pods really run (empty where they cannot)."""
        if self.process_nodes_unavailable is not None:
            return []
        return [n.name for n in processnodes.PROCESS_NODES]

    def _spawn_operator(self) -> None:
        assert self._binaries is not None
        self._spawn(
            "ray-operator",
            [
                str(self._binaries.ray_operator),
                f"--kubeconfig={self.kubeconfig('admin')}",
                "--enable-leader-election=false",
                "--metrics-addr=0",
                f"--health-probe-bind-address=127.0.0.1:{self._ports['operator']}",
                "--log-stdout-encoder=console",
                # no --watch-namespace: all namespaces
            ],
        )

    def _wait_operator(self) -> None:
        operator = f"http://127.0.0.1:{self._ports['operator']}/readyz"
        wait_until(
            "ray-operator /readyz",
            lambda: _http_ok(operator),
            60,
            check=self._check_alive,
        )

    def _wait_healthy(self, name: str) -> None:
        insecure = ssl.create_default_context()
        # The controller-manager's and scheduler's health endpoints use throwaway
        # self-signed certs; only liveness is checked, nothing secret is sent.
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE
        url = f"https://127.0.0.1:{self._ports[name]}/healthz"
        wait_until(
            f"{name} /healthz", partial(_http_ok, url, insecure), 60, check=self._check_alive
        )

    def _wait_ready(self) -> None:
        for name in ("controller-manager", "scheduler"):
            self._wait_healthy(name)
        self._wait_operator()
        with self.api_client() as api:
            core = k8s_client.CoreV1Api(api)
            # Service-account controller running: pods can go in new namespaces.
            wait_until(
                "default ServiceAccount",
                partial(core.read_namespaced_service_account, "default", "default"),
                60,
                0.5,
                self._check_alive,
            )

            leases = k8s_client.CoordinationV1Api(api)

            expected = len(FAKE_NODES) + len(self.process_nodes)

            def nodes_ready() -> bool:
                nodes = call_json(core.list_node)["items"]
                held = call_json(leases.list_namespaced_lease, "kube-node-lease")["items"]
                # A Lease per node: KWOK and procnode heartbeat as a kubelet would.
                if len(nodes) < expected or len(held) < expected:
                    return False
                for node in nodes:
                    conditions = node["status"].get("conditions") or []
                    if not any(c["type"] == "Ready" and c["status"] == "True" for c in conditions):
                        return False
                    # node.kubernetes.io/not-ready etc. go once the node lifecycle
                    # controller has seen the node Ready; nothing schedules before.
                    taints = node["spec"].get("taints") or []
                    if any(t["key"].startswith("node.kubernetes.io/") for t in taints):
                        return False
                return True

            wait_until(
                "nodes Ready and untainted",
                nodes_ready,
                90,
                0.5,
                self._check_alive,
            )

    # ---- internals: teardown

    def _signal_and_reap(self, procs: Sequence[_Process], timeout: float) -> list[str]:
        """SIGTERM, then SIGKILL after ``timeout``; the names of groups still alive."""
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                proc.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s ignored SIGTERM; killing it", proc.name)
        leftovers = []
        for proc in procs:
            # SIGKILL whatever is left of the group (the leader or anything it forked).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.popen.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.popen.wait(timeout=5)
            if self._group_alive(proc.popen.pid, wait=5.0):
                leftovers.append(proc.name)
        return leftovers

    @staticmethod
    def _group_alive(pgid: int, wait: float) -> bool:
        deadline = time.monotonic() + wait
        while True:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return False
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.05)


# ----------------------------------------------------------------------- command line


@contextlib.contextmanager
def _until_interrupted() -> Iterator[None]:
    # Ctrl-C, and `kill PID` too, tear everything down. SIGINT is set explicitly: a
    # shell starting us in the background leaves it ignored.
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = [signal.signal(sig, signal.default_int_handler) for sig in signals]
    try:
        yield
    except KeyboardInterrupt:
        pass
    finally:
        for sig, handler in zip(signals, previous, strict=True):
            signal.signal(sig, handler)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("build", help="build (or check) the cached binaries with build.sh")
    up = sub.add_parser("up", help="start the control plane and wait for Ctrl-C")
    up.add_argument("--work-dir", type=Path, help="an empty folder for state and logs, kept")
    up.add_argument("--kueue", action="store_true", help="also start Kueue (process nodes)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    if args.command == "build":
        return subprocess.run(["bash", str(BUILD_SCRIPT)], check=False).returncode

    ensure_built()
    plane = ControlPlane(work_dir=args.work_dir)
    with _until_interrupted():
        plane.start()
        try:
            if args.kueue:
                plane.start_kueue()
            print(f"apiserver:  {plane.server_url}")
            print(f"logs:       {plane.log_dir}")
            nodes = plane.process_nodes or f"none ({plane.process_nodes_unavailable})"
            print(f"process nodes (pods run as processes): {nodes}")
            for user in USERS:
                print(f"kubeconfig: {plane.kubeconfig(user)}  ({user})")
            print(
                f"\nexport KUBECONFIG={plane.kubeconfig('admin')}\n\nCtrl-C to stop.",
                flush=True,
            )
            while True:
                time.sleep(3600)
        finally:
            print("stopping...", file=sys.stderr)
            plane.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
