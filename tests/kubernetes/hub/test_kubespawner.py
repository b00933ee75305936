"""A new user on a hub that spawns with the real KubeSpawner, and raylab installed by its
chart: nobody onboarded them by hand.

The chart (deploy/helm/raylab) goes in with `helm install` into the hub's namespace, with
onboarding on. The hub (real JupyterHub and proxy, outside Kubernetes as the hub's service
account: the chart's <prefix>-onboarding ClusterRole, and Zero to JupyterHub's hub Role
for KubeSpawner) runs the chart README's extraConfig, so each user's server is a pod on a
process node, running as the service account onboarding made, with in-cluster config and
the chart's settings ConfigMap mounted. Then:

1. a new user's first `up` (POST raylab/clusters through the proxy, with their token)
   makes a cluster in their own Ray namespace, which becomes Ready;
   another new user, spawned with KubeSpawner's enable_user_namespaces, gets their pod in
   that namespace, mounting onboarding's copy of the chart's settings ConfigMap, and
   their first `up` works too;
2. the admin's server (the overview bound by the chart's rbac.adminOverviewSubjects)
   lists it with `?all=1`;
3. the chart's culler (its Deployment, on a process node, following every namespace as
   the chart's default does) suspends it once idle (the
   servers' own culling is off, so nothing else could);
4. `helm upgrade` with one value changed keeps every object, the chart's and the user's;
5. `helm uninstall` removes the chart's objects and nothing else.

The tests run in file order, as one deployment's life goes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from processnodes import POD_CIDR, PROCESS_GPU_TYPE, PROCESS_NODE_LABEL, process_profile

from ..kuberay_support import new_namespace
from ..test_helm_chart import CHART, Helm, read, request
from .deployment import ADMIN_PASSWORD, USER_PASSWORD, Hub, running_hub

RUN = uuid.uuid4().hex[:5]
PREFIX = f"ks-{RUN}"  # the chart's fullnameOverride: its cluster-wide objects are this module's
USER = "dana"  # never onboarded by hand
NS_USER = "erin"  # spawned with enable_user_namespaces: their pod in their own namespace
ADMIN = "admin"
SETTINGS_DIR = "/tmp/raylab-config"  # a process-node pod's private /tmp: where it can mount
TOKEN_SECONDS = 4 * 3600
IDLE_MINUTES = 0.25  # from the culler's first idle sight, after the checks of `up`
# Zero to JupyterHub's hub Role: what KubeSpawner needs in the namespace it spawns in.
HUB_ROLE_RULES = [
    {"apiGroups": [""], "resources": ["pods", "persistentvolumeclaims", "secrets", "services"],
     "verbs": ["get", "watch", "list", "create", "delete"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["get", "watch", "list"]},
]  # fmt: skip
# With enable_user_namespaces, KubeSpawner needs those rules in every namespace (its
# docs: "ClusterRoles analogous to its usual Roles"), watching pods across all of them.


def readme_hub_values() -> dict[str, Any]:
    """The Zero to JupyterHub values of the chart README's onboarding section."""
    text = (CHART / "README.md").read_text().split("## Onboarding at spawn", 1)[1]
    values: dict[str, Any] = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    return values


@dataclass
class KubeSpawnerHub(Hub):
    config: ClassVar[Path] = Path(__file__).with_name("kubespawner_config.py")
    spawn: dict[str, Any] = field(default_factory=dict)  # what kubespawner_config.py reads
    hub_env: dict[str, str] = field(default_factory=dict)  # the hub pod's, as mounted

    def _deployment(self) -> dict[str, Any]:
        return {
            "work": str(self.work), "port": self.port, "hub_port": self.hub_port,
            "proxy_api_port": self.proxy_api_port, "proxy_token": self.proxy_token,
            "api_token": self.api_token, "user_password": USER_PASSWORD,
            "admin_password": ADMIN_PASSWORD, "users": self.users, "admin": self.admin,
            **self.spawn,
        }  # fmt: skip

    def _env(self) -> dict[str, str]:
        return {**super()._env(), **self.hub_env}

    def user_token(self, user: str) -> str:
        token: str = self.api("POST", f"users/{user}/tokens", {"note": "tests"})["token"]
        return token

    def start_server(self, user: str) -> None:
        with contextlib.suppress(urllib.error.HTTPError):  # 400: already running
            self.api("POST", f"users/{user}/server")

    def wait_ready(self, user: str) -> None:
        def ready() -> bool:
            server = self.server_of(user)
            return bool(server and server.get("ready"))

        wait_until(f"{user}'s server ready", ready, timeout=120, interval=0.5)

    def user_api(self, user: str, token: str, method: str, path: str, body: Any = None) -> Any:
        """`path` under the user's server (through the proxy) as that user."""
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}/user/{user}/{path}", data=data, method=method,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(request, timeout=60) as reply:
                return reply.status, json.loads(reply.read() or b"null")
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode(errors="replace")


def _kubeconfig(plane: ControlPlane, core: k8s_client.CoreV1Api, namespace: str, account: str,
                path: Path) -> Path:  # fmt: skip
    """A kubeconfig with a token of `account` (the hub's, mounted in its pod in Kubernetes)."""
    request = {"spec": {"expirationSeconds": TOKEN_SECONDS}}
    token = call_json(core.create_namespaced_service_account_token, account, namespace,
                      request)["status"]["token"]  # fmt: skip
    doc = yaml.safe_load(plane.kubeconfig("admin").read_text())
    doc["users"] = [{"name": account, "user": {"token": token}}]
    doc["contexts"] = [{"name": account, "context": {"cluster": "raylab", "user": account,
                                                     "namespace": namespace}}]  # fmt: skip
    doc["current-context"] = account
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


def _allowed(admin_api: k8s_client.ApiClient, user: str, **attributes: str) -> bool:
    review = {"spec": {"user": user, "resourceAttributes": attributes}}
    auth = k8s_client.AuthorizationV1Api(admin_api)
    return bool(call_json(auth.create_subject_access_review, review)["status"]["allowed"])


def _chart_values(hub_ns: str) -> dict[str, Any]:
    return {
        "fullnameOverride": PREFIX,
        "settings": {
            "namespace_template": f"{PREFIX}-{{username}}",
            "admin_users": [ADMIN],
            "admin_watch_namespaces": ["*"],
            "default_gpu_type": PROCESS_GPU_TYPE,
            "wait_timeout": 120,
            # Only the chart's culler suspends, and soon enough to watch.
            "culler": "off",
            "idle_suspend_minutes": {PROCESS_GPU_TYPE: IDLE_MINUTES},
            "idle_warning_minutes": 0.1,
        },
        # The process nodes' type, so that the user's cluster really runs Ray.
        "gpuTypes": {PROCESS_GPU_TYPE: process_profile()},
        "rbac": {"adminOverviewSubjects": [
            {"kind": "ServiceAccount", "name": f"raylab-{ADMIN}", "namespace": hub_ns}]},
        "onboarding": {"enabled": True},
        "culler": {
            # No namespaces: the chart's default, every namespace (each user's is made
            # later, by onboarding).
            "interval": 2,
            "configDir": SETTINGS_DIR,
            # On a process node: its container runs this machine's `raylab`.
            "nodeSelector": {PROCESS_NODE_LABEL: "true"},
            "tolerations": [{"key": PROCESS_NODE_LABEL, "operator": "Exists"}],
        },
    }  # fmt: skip


@dataclass
class Deployment:
    hub: KubeSpawnerHub
    namespace: str  # the hub's, where the chart is installed
    helm: Helm
    values: Path  # the chart's values file


@pytest.fixture(scope="module")
def ks_hub(
    control_plane: ControlPlane,
    process_nodes: list[str],
    admin_api: k8s_client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Deployment]:
    work = tmp_path_factory.mktemp("ks-hub")
    core = k8s_client.CoreV1Api(admin_api)
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    helm = Helm(control_plane.binaries.helm, control_plane.kubeconfig("admin"), work / "helm")
    with new_namespace(admin_api, "ks-hub") as hub_ns:
        # What Zero to JupyterHub makes for its hub: the account and its Role.
        call_json(core.create_namespaced_service_account, hub_ns, {"metadata": {"name": "hub"}})
        call_json(rbac.create_namespaced_role, hub_ns,
                  {"metadata": {"name": "hub"}, "rules": HUB_ROLE_RULES})  # fmt: skip
        call_json(rbac.create_namespaced_role_binding, hub_ns, {
            "metadata": {"name": "hub"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "hub"},
            "subjects": [{"kind": "ServiceAccount", "name": "hub", "namespace": hub_ns}],
        })  # fmt: skip
        values = work / "values.yaml"
        values.write_text(yaml.safe_dump(_chart_values(hub_ns)))
        helm.run("install", "raylab", CHART, "-n", hub_ns, "-f", values)
        try:
            hub_user = f"system:serviceaccount:{hub_ns}:hub"
            wait_until(
                "the hub may bind the users' ClusterRole",
                lambda: _allowed(admin_api, hub_user, verb="bind", resource="clusterroles",
                                 group="rbac.authorization.k8s.io", name=f"{PREFIX}-user"),
            )  # fmt: skip
            # The hub pod mounts the chart's settings file on Jupyter's config path.
            config_map = call_json(core.read_namespaced_config_map, f"{PREFIX}-config", hub_ns)
            hub_config = work / "hub-usr-local-etc-jupyter"
            hub_config.mkdir()
            name = "jupyter_server_config.json"
            (hub_config / name).write_text(config_map["data"][name])
            mounted = readme_hub_values()["hub"]["extraVolumes"][0]["configMap"]["name"]
            assert mounted.endswith("-config"), mounted
            gateway = POD_CIDR.split("/")[0].rsplit(".", 1)[0] + ".1"  # the bridge's address
            toleration = {"key": PROCESS_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
            # KubeSpawner with enable_user_namespaces: its hub Role as a ClusterRole.
            call_json(
                rbac.create_cluster_role,
                {"metadata": {"name": f"{PREFIX}-hub"}, "rules": HUB_ROLE_RULES},
            )
            call_json(rbac.create_cluster_role_binding, {
                "metadata": {"name": f"{PREFIX}-hub"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                            "name": f"{PREFIX}-hub"},
                "subjects": [{"kind": "ServiceAccount", "name": "hub", "namespace": hub_ns}],
            })  # fmt: skip
            hub = KubeSpawnerHub(
                work / "hub", {}, {}, {}, "", [USER, NS_USER], ADMIN,
                spawn={
                    "hub_connect_ip": gateway,
                    "namespace": hub_ns,
                    "image": "raylab/singleuser:not-pulled",
                    "node_selector": {PROCESS_NODE_LABEL: "true"},
                    "tolerations": [toleration],
                    "environment": {"JUPYTER_CONFIG_PATH": SETTINGS_DIR,
                                    "RAY_USAGE_STATS_ENABLED": "0"},
                    # singleuser.storage.extraVolumes: the chart's ConfigMap, where a
                    # process-node pod can mount it.
                    "volumes": [{"name": "raylab-config",
                                 "configMap": {"name": f"{PREFIX}-config"}}],
                    "volume_mounts": [{"name": "raylab-config", "mountPath": SETTINGS_DIR}],
                    "singleuser": str(Path(sys.executable).parent / "jupyterhub-singleuser"),
                    "extra_config": list(readme_hub_values()["hub"]["extraConfig"].values()),
                    "user_namespace_users": [NS_USER],
                },
                hub_env={
                    "KUBECONFIG": str(_kubeconfig(control_plane, core, hub_ns, "hub",
                                                  work / "hub.kubeconfig")),
                    "JUPYTER_CONFIG_PATH": str(hub_config),
                },
            )  # fmt: skip
            with running_hub(hub):
                yield Deployment(hub, hub_ns, helm, values)
        finally:
            helm.run("uninstall", "raylab", "-n", hub_ns, check=False)
            with contextlib.suppress(ApiException):
                rbac.delete_cluster_role_binding(f"{PREFIX}-hub")
            with contextlib.suppress(ApiException):
                rbac.delete_cluster_role(f"{PREFIX}-hub")
            # Onboarding never deletes: the test removes its users' namespaces.
            for ns in call_json(core.list_namespace)["items"]:
                if ns["metadata"]["name"].startswith(f"{PREFIX}-"):
                    with contextlib.suppress(ApiException):
                        core.delete_namespace(ns["metadata"]["name"],
                                              propagation_policy="Background")  # fmt: skip


def _first(hub: KubeSpawnerHub, token: str, user: str = USER) -> dict[str, Any]:
    """The user's cluster `first`, as their server lists it."""
    code, listing = hub.user_api(user, token, "GET", "raylab/clusters")
    assert code == 200, listing
    cluster: dict[str, Any] = next(c for c in listing["clusters"] if c["name"] == "first")
    return cluster


def _server_story(core: k8s_client.CoreV1Api, user: str, namespace: str) -> str:
    """The user's server pod as Kubernetes tells it (its containers' states, restarts)
    and its log's end: why the proxy could not reach it, when a request through it fails."""
    pod = f"jupyter-{user}"
    try:
        status = call_json(core.read_namespaced_pod, pod, namespace)["status"]
        log = core.read_namespaced_pod_log(pod, namespace, tail_lines=40)
    except ApiException as exc:
        return f"pod {namespace}/{pod}: {exc.reason}"
    states = json.dumps(status.get("containerStatuses"), indent=1)
    return f"pod {namespace}/{pod} {status.get('phase')}: {states}\n{log}"


# The users' kinds, beside the chart's (test_helm_chart.KINDS): their plural.
USER_KINDS = {"Namespace": "namespaces", "ResourceQuota": "resourcequotas",
              "RayCluster": "rayclusters", "Pod": "pods"}  # fmt: skip


def _read(api: k8s_client.ApiClient, doc: dict[str, Any]) -> dict[str, Any] | None:
    if doc["kind"] not in USER_KINDS:
        return read(api, doc)
    version, meta = doc["apiVersion"], doc["metadata"]
    path = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    if "namespace" in meta:
        path += f"/namespaces/{meta['namespace']}"
    try:
        live: dict[str, Any] = request(
            api, "GET", f"{path}/{USER_KINDS[doc['kind']]}/{meta['name']}"
        )
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return live


def _uids(admin_api: k8s_client.ApiClient, docs: list[dict[str, Any]]) -> dict[str, str]:
    """uid of each object in `docs` that exists, by kind and name."""
    found = {}
    for doc in docs:
        live = _read(admin_api, doc)
        if live is not None:
            found[f"{doc['kind']}/{doc['metadata']['name']}"] = live["metadata"]["uid"]
    return found


def _users_objects(hub_ns: str) -> list[dict[str, Any]]:
    """What onboarding, KubeSpawner and the user made, none of it the chart's."""
    user_ns = f"{PREFIX}-{USER}"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": user_ns}},
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": f"raylab-{USER}", "namespace": hub_ns}},
        {"apiVersion": "v1", "kind": "ResourceQuota",
         "metadata": {"name": "raylab-user", "namespace": user_ns}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": {"name": f"{PREFIX}-user-{USER}", "namespace": user_ns}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster",
         "metadata": {"name": "first", "namespace": user_ns}},
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": f"jupyter-{USER}", "namespace": hub_ns}},
    ]  # fmt: skip


def test_new_user_first_up_and_the_admin_overview(
    ks_hub: Deployment, admin_api: k8s_client.ApiClient
) -> None:
    hub, hub_ns = ks_hub.hub, ks_hub.namespace
    core = k8s_client.CoreV1Api(admin_api)
    for user in (USER, ADMIN, NS_USER):  # NS_USER's is checked by the next test
        hub.start_server(user)
    for user in (USER, ADMIN):
        hub.wait_ready(user)

    # The server is a pod on a process node, as the account onboarding made for the user.
    pod = call_json(core.read_namespaced_pod, f"jupyter-{USER}", hub_ns)
    assert pod["spec"]["serviceAccountName"] == f"raylab-{USER}"
    assert pod["spec"]["nodeName"] in ("proc-cpu-0", "proc-gpu-0")
    user_ns = f"{PREFIX}-{USER}"
    call_json(core.read_namespace, user_ns)

    # 1. Their first `up`, from their server.
    token = hub.user_token(USER)
    body = {"name": "first", "gpu_type": PROCESS_GPU_TYPE, "workers": 0}
    status, made = hub.user_api(USER, token, "POST", "raylab/clusters", body)
    assert status == 201, (status, made, hub.log_tail(), _server_story(core, USER, hub_ns))
    assert made["cluster"]["namespace"] == user_ns

    wait_until("the first cluster Ready", lambda: _first(hub, token)["phase"] == "Ready",
               timeout=120, interval=1)  # fmt: skip

    # 2. The admin's overview shows it, in the user's namespace.
    admin_token = hub.user_token(ADMIN)
    status, listing = hub.user_api(ADMIN, admin_token, "GET", "raylab/clusters?all=1")
    assert status == 200, listing
    seen = [(c["name"], c["namespace"], c["owner"]) for c in listing["clusters"]]
    assert ("first", user_ns, USER) in seen, seen


def test_user_namespace_pod_mounts_the_copied_settings(
    ks_hub: Deployment, admin_api: k8s_client.ApiClient
) -> None:
    """enable_user_namespaces: the pod runs in the user's own namespace, where it cannot
    mount the chart's ConfigMap; it mounts onboarding's copy there (the same volume),
    and its first `up` reads the chart's settings from it (the GPU type it asks for
    exists only in them)."""
    hub, hub_ns = ks_hub.hub, ks_hub.namespace
    core = k8s_client.CoreV1Api(admin_api)
    hub.wait_ready(NS_USER)
    user_ns = f"{PREFIX}-{NS_USER}"
    pod = call_json(core.read_namespaced_pod, f"jupyter-{NS_USER}", user_ns)
    assert pod["spec"]["serviceAccountName"] == f"raylab-{NS_USER}"
    volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "raylab-config")
    name = volume["configMap"]["name"]
    chart = call_json(core.read_namespaced_config_map, name, hub_ns)
    copied = call_json(core.read_namespaced_config_map, name, user_ns)
    assert copied["data"] == chart["data"]
    assert copied["metadata"]["labels"]["raylab.io/owner"] == NS_USER

    token = hub.user_token(NS_USER)
    body = {"name": "first", "gpu_type": PROCESS_GPU_TYPE, "workers": 0}
    status, made = hub.user_api(NS_USER, token, "POST", "raylab/clusters", body)
    assert status == 201, (status, made, hub.log_tail(), _server_story(core, NS_USER, user_ns))
    assert made["cluster"]["namespace"] == user_ns
    # Made is enough: the first test watched one become Ready. Not left to run beside
    # the tests that follow.
    status, _ = hub.user_api(NS_USER, token, "DELETE", "raylab/clusters/first")
    assert status == 204, status


def test_the_charts_culler_suspends_it_when_idle(
    ks_hub: Deployment, admin_api: k8s_client.ApiClient
) -> None:
    hub = ks_hub.hub
    core = k8s_client.CoreV1Api(admin_api)
    selector = "app.kubernetes.io/component=culler"
    pods = call_json(core.list_namespaced_pod, ks_hub.namespace, label_selector=selector)
    assert [p["spec"]["nodeName"] for p in pods["items"]] == ["proc-cpu-0"]
    token = hub.user_token(USER)
    name = pods["items"][0]["metadata"]["name"]
    try:
        wait_until("the idle cluster Suspended",
                   lambda: _first(hub, token)["phase"] == "Suspended",
                   timeout=90, interval=1)  # fmt: skip
    except TimeoutError as exc:
        log = core.read_namespaced_pod_log(name, ks_hub.namespace)
        said = [line for line in log.splitlines() if not line.startswith("sweep: 0 clusters")]
        raise AssertionError(f"{exc}; the culler said:\n" + "\n".join(said[-40:])) from None
    idle = _first(hub, token)["idle"]
    assert idle.get("suspended_at"), idle  # kept on it, with when
    log = core.read_namespaced_pod_log(name, ks_hub.namespace)
    assert "watching every namespace" in log, log[-2000:]
    assert "suspended first" in log, log[-2000:]


def test_helm_upgrade_keeps_everything(ks_hub: Deployment, admin_api: k8s_client.ApiClient) -> None:
    helm, hub_ns = ks_hub.helm, ks_hub.namespace
    charts = helm.template(hub_ns, "-f", ks_hub.values)
    everything = [*charts, *_users_objects(hub_ns)]
    before = _uids(admin_api, everything)
    assert len(before) == len(everything), sorted(before)
    helm.run("upgrade", "raylab", CHART, "-n", hub_ns, "-f", ks_hub.values,
             "--set", "culler.interval=3")  # fmt: skip
    assert _uids(admin_api, everything) == before
    # The user's server and cluster are still there for them.
    assert (ks_hub.hub.server_of(USER) or {}).get("ready")
    assert _first(ks_hub.hub, ks_hub.hub.user_token(USER))["phase"] == "Suspended"


def test_helm_uninstall_removes_only_what_the_chart_made(
    ks_hub: Deployment, admin_api: k8s_client.ApiClient
) -> None:
    helm, hub_ns = ks_hub.helm, ks_hub.namespace
    charts = helm.template(hub_ns, "-f", ks_hub.values)
    users = _users_objects(hub_ns)
    kept = _uids(admin_api, users)
    helm.run("uninstall", "raylab", "-n", hub_ns, "--wait")
    assert _uids(admin_api, charts) == {}
    assert _uids(admin_api, users) == kept
