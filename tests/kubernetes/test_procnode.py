"""The process nodes' kubelet (harness/go/procnode) behaves like a kubelet where raylab,
KubeRay, Ray and kubectl can tell: pods run their command as processes with their
environment, volumes, IP and cluster DNS; init containers, restart back-off, exit codes
and probes are reported as a kubelet reports them; logs, exec and port-forward work
through the API server. Small pods of plain shell and Python, no Ray: a few seconds each.
"""

from __future__ import annotations

import base64
import contextlib
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlplane import call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.stream import portforward, stream
from processnodes import IMAGE_NOT_PULLED_LABEL, PROCESS_NODE_LABEL, resolving_env

# Where pods land: the process nodes are tainted, so a pod must ask for them.
# The test venv is the pods' "image": where the checkout lies under /tmp (a CI clone) a
# pod's private /tmp holds that one folder too (see the harness README), and nothing else.
_IMAGE_IN_TMP = sorted(
    {Path(p).parts[2] for p in (sys.prefix, sys.base_prefix) if Path(p).parts[1:2] == ("tmp",)}
)
LS_TMP = "ls /tmp" + "".join(f" | grep -vxF {shlex.quote(n)}" for n in _IMAGE_IN_TMP)

ON_PROCESS_NODE: dict[str, Any] = {
    "nodeSelector": {PROCESS_NODE_LABEL: "true"},
    "tolerations": [{"key": PROCESS_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
}


def pod(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {**ON_PROCESS_NODE, "terminationGracePeriodSeconds": 2, **spec,
                 "containers": list(containers)},
    }  # fmt: skip


def sh(name: str, script: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "image": "not-pulled:here", "command": ["sh", "-c", script], **fields}


def create(api: k8s_client.ApiClient, namespace: str, body: dict[str, Any]) -> None:
    call_json(k8s_client.CoreV1Api(api).create_namespaced_pod, namespace, body)


def read(api: k8s_client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    got: dict[str, Any] = call_json(k8s_client.CoreV1Api(api).read_namespaced_pod, name, namespace)
    return got


def wait_pod(
    api: k8s_client.ApiClient,
    namespace: str,
    name: str,
    what: str,
    until: Callable[[dict[str, Any]], bool],
    timeout: float = 60,
) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        body = read(api, namespace, name)
        return body if until(body) else None

    return wait_until(f"pod {name}: {what}", probe, timeout=timeout, interval=0.3)


def ready(body: dict[str, Any]) -> bool:
    conditions = body["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def logs(api: k8s_client.ApiClient, namespace: str, name: str, **options: Any) -> str:
    core = k8s_client.CoreV1Api(api)
    response = core.read_namespaced_pod_log(name, namespace, _preload_content=False, **options)
    return str(response.data.decode())


def test_process_nodes_say_what_they_are(
    admin_api: k8s_client.ApiClient, process_nodes: list[str]
) -> None:
    core = k8s_client.CoreV1Api(admin_api)
    nodes = {n["metadata"]["name"]: n for n in call_json(core.list_node)["items"]}
    for name in process_nodes:
        labels = nodes[name]["metadata"]["labels"]
        assert labels[PROCESS_NODE_LABEL] == "true"
        assert labels[IMAGE_NOT_PULLED_LABEL] == "true"
        taints = {(t["key"], t["effect"]) for t in nodes[name]["spec"]["taints"]}
        assert (PROCESS_NODE_LABEL, "NoSchedule") in taints
        assert any(c["type"] == "Ready" and c["status"] == "True"
                   for c in nodes[name]["status"]["conditions"])  # fmt: skip
    gpu = nodes["proc-gpu-0"]
    assert gpu["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    assert gpu["metadata"]["labels"]["nvidia.com/gpu.product"] == "Logical-GPU-no-device"


ENV_SCRIPT = """
echo "ip=$POD_IP name=$POD_NAME mem=$MEM_MI cpu=$CPUS greeting=$GREETING"
echo "secret=$PASSWORD colour=$COLOUR host=$(hostname) kube=$KUBERNETES_SERVICE_HOST"
echo "files=$(cat /mnt/secret/password)/$(cat /mnt/config/colour)"
echo "sa=$(cat /var/run/secrets/kubernetes.io/serviceaccount/namespace)"
echo "limit=$(cat /sys/fs/cgroup/memory/memory.limit_in_bytes) pid1=$(cut -d" " -f2 /proc/1/stat)"
echo "dns=$(getent hosts self-svc.$POD_NS.svc.cluster.local | cut -d' ' -f1)"
echo "short=$(getent hosts self-svc | cut -d' ' -f1) api=$(getent hosts kubernetes.default)"
python3 -c "import urllib.request, ssl, os
sa = '/var/run/secrets/kubernetes.io/serviceaccount/'
ctx = ssl.create_default_context(cafile=sa + 'ca.crt')
req = urllib.request.Request('https://kubernetes.default.svc/version',
    headers={'Authorization': 'Bearer ' + open(sa + 'token').read()})
print('version=' + __import__('json').load(urllib.request.urlopen(req, context=ctx))['major'])"
touch /tmp/mine
echo done
exec python3 -m http.server 8080
"""


MEMORY_IN_MI = {"resource": "limits.memory", "divisor": "1Mi"}


def test_a_pod_runs_its_command_with_env_volumes_ip_and_dns(
    admin_api: k8s_client.ApiClient, namespace: str, process_nodes: list[str], tmp_path: Path
) -> None:
    core = k8s_client.CoreV1Api(admin_api)
    secret = {
        "metadata": {"name": "creds"},
        "data": {"password": base64.b64encode(b"s3cret").decode()},
    }
    call_json(core.create_namespaced_secret, namespace, secret)
    call_json(core.create_namespaced_config_map, namespace,
              {"metadata": {"name": "settings"}, "data": {"colour": "teal"}})  # fmt: skip
    # A headless Service whose endpoints are this very pod: cluster DNS answers with its IP.
    call_json(core.create_namespaced_service, namespace, {
        "metadata": {"name": "self-svc"},
        "spec": {"clusterIP": "None", "selector": {"app": "env"}, "publishNotReadyAddresses": True,
                 "ports": [{"port": 8080}]},
    })  # fmt: skip
    env = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": MEMORY_IN_MI}},
        {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
        {"name": "WHO", "value": "world"},
        {"name": "GREETING", "value": "hello-$(WHO)-$$(WHO)"},
        {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}},
        {"name": "COLOUR", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "colour"}}},
    ]  # fmt: skip
    container = sh(
        "main",
        ENV_SCRIPT,
        env=env,
        resources={"limits": {"cpu": "500m", "memory": "256Mi"}},
        volumeMounts=[
            {"name": "secret", "mountPath": "/mnt/secret"},
            {"name": "config", "mountPath": "/mnt/config"},
        ],
        ports=[{"name": "http", "containerPort": 8080}],
        readinessProbe={"httpGet": {"port": "http", "path": "/"}, "periodSeconds": 1},
    )
    volumes = [
        {"name": "secret", "secret": {"secretName": "creds"}},
        {"name": "config", "configMap": {"name": "settings"}},
    ]
    create(admin_api, namespace, pod("env", container, volumes=volumes))
    body = wait_pod(admin_api, namespace, "env", "Ready (its HTTP readiness probe passes)", ready)
    ip = body["status"]["podIP"]
    assert body["spec"]["nodeName"] in process_nodes
    assert ip.startswith("10.245."), ip
    status = body["status"]["containerStatuses"][0]
    assert status["imageID"] == "procnode://image-not-pulled"
    assert "running" in status["state"]

    text = wait_until("the script's output", lambda: (t := logs(admin_api, namespace, "env"))
                      and "done" in t and t, timeout=30)  # fmt: skip
    lines = dict(
        part.split("=", 1) for line in text.splitlines() for part in line.split() if "=" in part
    )
    assert lines["ip"] == ip
    assert lines["name"] == "env"
    assert lines["mem"] == "256"
    assert lines["cpu"] == "1"  # rounded up, as the kubelet does
    assert lines["greeting"] == "hello-world-$(WHO)"
    assert (lines["secret"], lines["colour"]) == ("s3cret", "teal")
    assert lines["files"] == "s3cret/teal"
    assert lines["host"] == "env"
    assert lines["kube"] == "10.96.0.1"
    assert lines["sa"] == namespace
    assert lines["limit"] == str(256 * 2**20)
    assert lines["pid1"] == "(procnode)"  # a PID namespace of its own, under the init
    assert lines["dns"] == ip
    assert lines["short"] == ip  # through the namespace's search path
    assert lines["api"] == "10.96.0.1"
    assert lines["version"] == "1"  # the in-cluster API works with the pod's own token

    # Through the API server, as kubectl does: exec, then port-forward to the pod.
    out = stream(core.connect_get_namespaced_pod_exec, "env", namespace,
                 command=["sh", "-c", f"{LS_TMP}; hostname; echo $PASSWORD"],
                 stderr=True, stdin=False, stdout=True, tty=False)  # fmt: skip
    assert out.split() == ["mine", "env", "s3cret"]
    forward = portforward(
        core.connect_get_namespaced_pod_portforward, "env", namespace, ports="8080"
    )
    sock = forward.socket(8080)
    try:
        sock.sendall(b"GET / HTTP/1.0\r\nHost: env\r\n\r\n")
        reply = b""
        # The server closing its end closes the stream; the client may see that as a reset.
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                reply += chunk
    finally:
        sock.close()
    assert reply.startswith(b"HTTP/1.0 200"), reply[:200]
    # The pod's IP is reachable from the tests' network namespace too, and a process
    # there resolves Service names with the cluster's DNS (resolving_env).
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=10) as page:
        assert page.status == 200
    name = f"self-svc.{namespace}.svc.cluster.local"
    found = subprocess.run([*resolving_env(tmp_path), "getent", "hosts", name],
                           capture_output=True, text=True, check=True)  # fmt: skip
    assert found.stdout.split()[0] == ip


def test_init_containers_then_crash_loop_back_off(
    admin_api: k8s_client.ApiClient, namespace: str, process_nodes: list[str]
) -> None:
    init = sh("prepare", "echo prepared > /work/note")
    init["volumeMounts"] = [{"name": "work", "mountPath": "/work"}]
    # stdout and stderr are two pipes, read apart as a kubelet reads them: lines of the
    # two keep their order in the log only when they are written apart in time.
    main = sh("main", f"cat /work/note; {LS_TMP}; sleep 1; echo 'fatal: bad config' >&2; exit 3",
              volumeMounts=[{"name": "work", "mountPath": "/work"}],
              terminationMessagePolicy="FallbackToLogsOnError")  # fmt: skip
    create(admin_api, namespace, pod("crash", main, initContainers=[init],
                                     volumes=[{"name": "work", "emptyDir": {}}]))  # fmt: skip

    def backing_off(body: dict[str, Any]) -> bool:
        statuses = body["status"].get("containerStatuses") or [{}]
        waiting = (statuses[0].get("state") or {}).get("waiting") or {}
        return waiting.get("reason") == "CrashLoopBackOff"

    body = wait_pod(admin_api, namespace, "crash", "CrashLoopBackOff", backing_off)
    (prepare,) = body["status"]["initContainerStatuses"]
    assert prepare["state"]["terminated"]["exitCode"] == 0
    assert prepare["state"]["terminated"]["reason"] == "Completed"
    status = body["status"]["containerStatuses"][0]
    assert status["restartCount"] >= 1
    assert "back-off 10s restarting failed container=main" in status["state"]["waiting"]["message"]
    last = status["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (3, "Error")
    assert last["message"].splitlines()[-1] == "fatal: bad config"
    assert body["status"]["phase"] == "Running"  # restarting, as the kubelet counts it
    assert not ready(body)
    # The previous run's log, through the API server; the pod's /tmp is its own.
    previous = logs(admin_api, namespace, "crash", container="main", previous=True)
    assert previous.splitlines() == ["prepared", "fatal: bad config"]


def test_liveness_restarts_and_never_policy_fails(
    admin_api: k8s_client.ApiClient, namespace: str, process_nodes: list[str]
) -> None:
    # Alive while /tmp/alive exists; the script removes it after 2 s. /tmp is the pod's,
    # so the file is still there in the second run only if the first run left it.
    live = sh("main", "[ -e /tmp/ran ] && exec sleep 600; touch /tmp/alive /tmp/ran; "
              "sleep 2; rm /tmp/alive; exec sleep 600",
              livenessProbe={"exec": {"command": ["test", "-e", "/tmp/alive"]},
                             "periodSeconds": 1, "failureThreshold": 2})  # fmt: skip
    create(admin_api, namespace, pod("live", live))
    once = sh("main", "echo bye; exit 7")
    create(admin_api, namespace, pod("once", once, restartPolicy="Never"))

    body = wait_pod(admin_api, namespace, "live", "restarted by its liveness probe",
                    lambda b: (b["status"].get("containerStatuses") or [{}])[0]
                    .get("restartCount", 0) >= 1 and "running" in
                    b["status"]["containerStatuses"][0]["state"])  # fmt: skip
    last = body["status"]["containerStatuses"][0]["lastState"]["terminated"]
    assert last["exitCode"] == 143  # SIGTERM, passed on by the container's init
    failed = wait_pod(
        admin_api, namespace, "once", "Failed", lambda b: b["status"]["phase"] == "Failed"
    )
    terminated = failed["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (7, "Error")
    assert failed["status"]["containerStatuses"][0]["restartCount"] == 0
    assert logs(admin_api, namespace, "once") == "bye\n"


def _links(*which: str) -> list[str]:
    """`ip -o link show WHICH` here, where procnode's bridge `procbr0` is: a line per link."""
    shown = subprocess.run(["ip", "-o", "link", "show", *which],
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    return shown.splitlines()


def _bridge_address() -> str:
    (bridge,) = _links("procbr0")
    return bridge.split("link/ether ", 1)[1].split()[0]


def _bridge_ports() -> set[str]:
    return {line.split(":")[1].strip().split("@")[0] for line in _links("master", "procbr0")}


def test_a_pods_network_outlives_the_pods_that_go(
    admin_api: k8s_client.ApiClient, namespace: str, process_nodes: list[str]
) -> None:
    """A bridge left to pick its own address takes its lowest port's, so a pod that went
    changed it, and the other pods' replies to the gateway were lost until their
    neighbour entry expired (a request through the hub's proxy to a notebook pod failed
    with ETIMEDOUT while a cluster's pod went). The address must stay, and a pod that
    answered before others came and went must answer at once after."""
    server = sh("main", "exec python3 -m http.server 8080",
                readinessProbe={"tcpSocket": {"port": 8080}, "periodSeconds": 1})  # fmt: skip
    create(admin_api, namespace, pod("stays", server))
    ip = wait_pod(admin_api, namespace, "stays", "Ready", ready)["status"]["podIP"]
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=10) as page:
        assert page.status == 200  # its neighbour entry for the gateway is now filled
    address = _bridge_address()

    ports = _bridge_ports()
    core = k8s_client.CoreV1Api(admin_api)
    passing = [f"passing-{i}" for i in range(4)]
    for name in passing:
        create(admin_api, namespace, pod(name, sh("main", "exec sleep 600")))
    for name in passing:
        wait_pod(admin_api, namespace, name, "Running", lambda b: b["status"]["phase"] == "Running")
    assert len(_bridge_ports() - ports) == len(passing)
    for name in passing:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    # Their veths gone from the bridge (the bridge has chosen its address again by then).
    wait_until("the passing pods' veths gone", lambda: not _bridge_ports() - ports, timeout=60)

    assert _bridge_address() == address
    with urllib.request.urlopen(f"http://{ip}:8080/", timeout=3) as page:
        assert page.status == 200
