"""deploy/helm/raylab against the real test control plane, with the real `helm`.

- `helm lint` and a strict server-side dry run (every object created with dryRun=All and
  fieldValidation=Strict, so an unknown or misspelt field fails) of `helm template`, with
  the default values and with every option on (helm/all-on.yaml), Kueue's CRDs and the
  prometheus-operator's ServiceMonitor CRD installed;
- the values schema: an unknown key or a wrong type fails `helm install`, naming it; the
  chart accepts exactly c.Raylab's options and GpuProfile's fields, with their types;
- the chart's rights are those of the docs;
- a real install: the culler runs (on a process node, where there are some), `helm
  upgrade` of one value changes only what that value changes, and `helm uninstall`
  removes only what the chart made: a user's namespace and RayCluster stay.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException

from raylab.profiles import DEFAULT_PROFILES, GpuProfile

from .helm_schema import gpu_type_schema, settings_properties
from .kuberay_support import ROOT, documented_rbac, kwok_raycluster, new_namespace

CHART = ROOT / "deploy" / "helm" / "raylab"
ALL_ON = Path(__file__).resolve().parent / "helm" / "all-on.yaml"
DOCS = ROOT / "docs"
CHART_LABELS = ("name", "instance", "managed-by", "part-of")
_CRD_API = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")


# ------------------------------------------------------------------------------ helm


class Helm:
    """The harness's `helm`, as the admin, with its own config and cache folders."""

    def __init__(self, binary: Path, kubeconfig: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "KUBECONFIG": str(kubeconfig),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def run(self, *args: str | Path, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binary), *map(str, args)],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"helm {' '.join(map(str, args))} failed:\n{result.stderr}")
        return result

    def template(self, namespace: str, *values: str | Path) -> list[dict[str, Any]]:
        out = self.run("template", "raylab", CHART, "--namespace", namespace, *values).stdout
        return [doc for doc in yaml.safe_load_all(out) if doc]


@pytest.fixture(scope="module")
def helm(control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    home = tmp_path_factory.mktemp("helm")
    return Helm(control_plane.binaries.helm, control_plane.kubeconfig("admin"), home)


# ------------------------------------------------------------------ API, by manifest

# Where each kind the chart makes lives in the API: (plural, namespaced).
KINDS: dict[str, tuple[str, bool]] = {
    "ServiceAccount": ("serviceaccounts", True),
    "ConfigMap": ("configmaps", True),
    "Service": ("services", True),
    "Deployment": ("deployments", True),
    "DaemonSet": ("daemonsets", True),
    "NetworkPolicy": ("networkpolicies", True),
    "ServiceMonitor": ("servicemonitors", True),
    "Role": ("roles", True),
    "RoleBinding": ("rolebindings", True),
    "ClusterRole": ("clusterroles", False),
    "ClusterRoleBinding": ("clusterrolebindings", False),
    "ResourceFlavor": ("resourceflavors", False),
    "ClusterQueue": ("clusterqueues", False),
    "WorkloadPriorityClass": ("workloadpriorityclasses", False),
}


def collection_path(doc: dict[str, Any]) -> str:
    plural, namespaced = KINDS[doc["kind"]]
    version = doc["apiVersion"]
    base = f"/api/{version}" if "/" not in version else f"/apis/{version}"
    if namespaced:
        base += f"/namespaces/{doc['metadata']['namespace']}"
    return f"{base}/{plural}"


def object_path(doc: dict[str, Any]) -> str:
    return f"{collection_path(doc)}/{doc['metadata']['name']}"


def request(
    api: k8s_client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    query: list[tuple[str, str]] | None = None,
) -> Any:
    method, url, headers, data, _ = api.param_serialize(
        method,
        path,
        query_params=query or [],
        header_params={"Content-Type": "application/json", "Accept": "application/json"},
        body=body,
        auth_settings=["BearerToken"],
    )
    response = api.call_api(method, url, header_params=headers, body=data)
    response.read()
    if not 200 <= response.status < 300:
        raise ApiException(http_resp=response)
    return json.loads(response.data)


def dry_run_create(api: k8s_client.ApiClient, doc: dict[str, Any]) -> None:
    """Create `doc` for real minus the write: admission, defaulting, schema and unknown
    fields (Strict) are all checked by the API server."""
    query = [("dryRun", "All"), ("fieldValidation", "Strict")]
    try:
        request(api, "POST", collection_path(doc), doc, query)
    except ApiException as exc:
        raise AssertionError(
            f"{doc['kind']} {doc['metadata']['name']} refused: {exc.body}"
        ) from None


def read(api: k8s_client.ApiClient, doc: dict[str, Any]) -> dict[str, Any] | None:
    try:
        return request(api, "GET", object_path(doc))  # type: ignore[no-any-return]
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def install_crd(api: k8s_client.ApiClient, path: Path) -> None:
    body = yaml.safe_load(path.read_text())
    ext = k8s_client.ApiextensionsV1Api(api)
    with contextlib.suppress(ApiException):  # there already (an earlier test, same file)
        call_json(ext.create_custom_resource_definition, body)

    def established() -> bool:
        crd = call_json(ext.read_custom_resource_definition, body["metadata"]["name"])
        conditions = crd.get("status", {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

    wait_until(f"CRD {body['metadata']['name']} Established", established, timeout=60)


@pytest.fixture(scope="module")
def crds(control_plane: ControlPlane, admin_api: k8s_client.ApiClient) -> None:
    """The CRDs of the optional objects: Kueue's (as the harness installs them) and the
    prometheus-operator's ServiceMonitor."""
    control_plane.install_kueue_crds()
    install_crd(admin_api, control_plane.binaries.servicemonitor_crd)


# --------------------------------------------------------------------------- checks


@pytest.mark.parametrize("values", [[], ["--values", ALL_ON]], ids=["defaults", "all-on"])
def test_lint(helm: Helm, values: list[str | Path]) -> None:
    result = helm.run("lint", "--strict", CHART, *values)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.usefixtures("crds")
@pytest.mark.parametrize("values", [[], ["--values", ALL_ON]], ids=["defaults", "all-on"])
def test_server_side_dry_run(
    helm: Helm, admin_api: k8s_client.ApiClient, namespace: str, values: list[str | Path]
) -> None:
    docs = helm.template(namespace, *values)
    kinds = {doc["kind"] for doc in docs}
    if values:  # every kind the chart can make
        assert kinds == set(KINDS), kinds
    for doc in docs:
        labels = doc["metadata"].get("labels", {})
        for key in CHART_LABELS:
            assert f"app.kubernetes.io/{key}" in labels, (doc["kind"], key)
        dry_run_create(admin_api, doc)


def test_culler_bound_per_namespace(
    helm: Helm, admin_api: k8s_client.ApiClient, namespace: str
) -> None:
    """rbacScope=namespaces: a RoleBinding in each listed namespace, no cluster-wide one."""
    docs = helm.template(
        namespace,
        "--set",
        "culler.rbacScope=namespaces",
        "--set",
        f"culler.namespaces={{{namespace}}}",
    )
    bindings = [d for d in docs if d["kind"].endswith("Binding")]
    assert [(b["kind"], b["metadata"]["namespace"]) for b in bindings] == [
        ("RoleBinding", namespace)
    ]
    dry_run_create(admin_api, bindings[0])
    refused = helm.run("template", "r", CHART, "--set", "culler.rbacScope=namespaces", check=False)
    assert refused.returncode != 0
    assert "culler.namespaces is empty" in refused.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"culler": {"replica": 2}}, "at '/culler': additional properties 'replica' not allowed"),
        ({"settings": {"max_gpu_per_user": 8}}, "additional properties 'max_gpu_per_user'"),
        ({"gpuTypes": {"v100": {"description": "V100", "gpus": 8}}}, "'gpus' not allowed"),
        ({"culler": {"replicas": "two"}}, "at '/culler/replicas': got string, want integer"),
        ({"settings": {"max_gpus_per_user": "16"}}, "/settings/max_gpus_per_user': got string"),
        ({"kueue": {"enabled": "yes"}}, "at '/kueue/enabled': got string, want boolean"),
        ({"onboarding": {"serviceAccount": "shared"}}, "at '/onboarding/serviceAccount'"),
    ],
    ids=[
        "unknown-key",
        "unknown-setting",
        "unknown-profile-field",
        "wrong-type",
        "wrong-setting-type",
        "wrong-bool",
        "account-without-username",
    ],
)
def test_bad_values_fail_install(
    helm: Helm, tmp_path: Path, namespace: str, values: dict[str, Any], message: str
) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    result = helm.run("install", "bad", CHART, "-n", namespace, "-f", path, check=False)
    assert result.returncode != 0
    assert message in result.stderr, result.stderr
    assert "bad" not in helm.run("list", "-n", namespace, "-q").stdout.split()


def test_gpu_type_not_defined_is_named(helm: Helm) -> None:
    result = helm.run(
        "template", "r", CHART, "--set", "prePuller.enabled=true",
        "--set", "prePuller.images={ray}", "--set", "prePuller.gpuTypes={v100}",
        check=False,
    )  # fmt: skip
    assert result.returncode != 0
    assert 'prePuller.gpuTypes names GPU type "v100"' in result.stderr


def test_schema_follows_raylab(helm: Helm) -> None:
    """settings takes exactly c.Raylab's options (gpu_types from gpuTypes), with their
    types; a GPU type exactly GpuProfile's fields; with no gpuTypes the settings file
    holds raylab's built-in profiles."""
    schema = json.loads((CHART / "values.schema.json").read_text())
    assert schema["properties"]["settings"]["properties"] == settings_properties()
    assert schema["properties"]["gpuTypes"]["additionalProperties"] == gpu_type_schema()
    config = next(d for d in helm.template("jhub") if d["kind"] == "ConfigMap")
    types = json.loads(config["data"]["jupyter_server_config.json"])["Raylab"]["gpu_types"]
    assert {n: GpuProfile.from_mapping(n, p) for n, p in types.items()} == DEFAULT_PROFILES
    readme = (CHART / "README.md").read_text()
    assert [n for n in settings_properties() if f"| `{n}` |" not in readme] == []

    def closed(node: Any, where: str) -> None:
        if isinstance(node, dict):
            if node.get("properties") is not None:
                assert node.get("additionalProperties") is False, where
            for key, value in node.items():
                closed(value, f"{where}/{key}")
        elif isinstance(node, list):
            for i, value in enumerate(node):
                closed(value, f"{where}/{i}")

    closed(schema, "")


def _doc_blocks(page: str) -> list[dict[str, Any]]:
    text = (DOCS / page).read_text()
    return [yaml.safe_load(part.split("```", 1)[0]) for part in text.split("```yaml\n")[1:]]


def test_rights_are_the_documented_ones(helm: Helm) -> None:
    roles = {
        d["metadata"]["name"]: d["rules"]
        for d in helm.template("jhub")
        if d["kind"] == "ClusterRole"
    }
    rbac = documented_rbac()
    culler_role = next(d for d in _doc_blocks("culler.md") if d["kind"] == "Role")
    viewer = next(d for d in _doc_blocks("kueue.md") if d.get("kind") == "ClusterRole")
    assert roles == {
        "raylab-user": rbac["Role"]["rules"],
        "raylab-admin-overview": rbac["ClusterRole"]["rules"],
        "raylab-queue-viewer": viewer["rules"],
        "raylab-culler": culler_role["rules"],
    }


def test_settings_file_is_what_raylab_reads(helm: Helm, tmp_path: Path) -> None:
    """The ConfigMap's file, on Jupyter's config path, gives raylab the chart's values:
    the Kueue queue and priority classes, the culler among the NetworkPolicy peers."""
    docs = helm.template("jhub", "--values", ALL_ON)
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    (tmp_path / "jupyter_server_config.json").write_text(
        config["data"]["jupyter_server_config.json"]
    )
    probe = (
        "import json; from raylab.config import Settings; s = Settings.load(); o = s.options;"
        "print(json.dumps({'types': list(s.profiles.gpu_types), 'queue': s.local_queue('h100'),"
        "'a100_queue': s.local_queue('a100'), 'priorities': o.priority_classes,"
        "'peers': o.network_policy_peers, 'idle': s.profiles.gpu_types['a100']"
        ".idle_suspend_minutes, 'warning': o.idle_warning_minutes}))"
    )
    env = {**os.environ, "JUPYTER_CONFIG_PATH": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout
    got = json.loads(out)
    assert sorted(got["types"]) == ["a100", "cpu", "h100", "mi300"]
    assert (got["queue"], got["a100_queue"]) == ("team", "a100-team")
    assert got["priorities"] == ["raylab-all-normal", "raylab-all-high"]
    assert got["idle"] == 30.0  # settings.idle_suspend_minutes over the profile's own
    assert got["warning"] == 5.5
    culler_peer = {
        "podSelector": {
            "matchLabels": {
                "app.kubernetes.io/name": "raylab",
                "app.kubernetes.io/instance": "raylab",
                "app.kubernetes.io/component": "culler",
            }
        },
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "jhub"}},
    }
    assert got["peers"] == [{"podSelector": {"matchLabels": {"app": "shared-server"}}}, culler_peer]


def _page_block(page: str, section: str) -> dict[str, Any]:
    """The first YAML block of a section of a page under docs/."""
    text = (ROOT / "docs" / page).read_text().split(section, 1)[1]
    block: dict[str, Any] = yaml.safe_load(text.split("```yaml\n", 1)[1].split("```", 1)[0])
    return block


def test_the_documented_install_is_what_the_chart_takes(helm: Helm, tmp_path: Path) -> None:
    """docs/zero-to-jupyterhub.md's values pass the chart's schema as written, and its Zero
    to JupyterHub values mount the ConfigMap that install makes, where raylab reads it."""
    values = tmp_path / "my-values.yaml"
    values.write_text(yaml.safe_dump(_page_block("zero-to-jupyterhub.md", "## 3. The chart")))
    docs = helm.template("jhub", "--values", values)
    config = next(d for d in docs if d["kind"] == "ConfigMap")["metadata"]["name"]
    kinds = {d["kind"] for d in docs}
    assert {"ClusterRole", "Deployment", "ConfigMap", "NetworkPolicy"} <= kinds, kinds
    onboarding = [d for d in docs if d["metadata"]["name"] == "raylab-onboarding"]
    # onboarding.enabled: its rights, cluster-wide and on the settings in the release's namespace
    assert {"ClusterRole", "ClusterRoleBinding", "Role"} <= {d["kind"] for d in onboarding}
    z2jh = _page_block("zero-to-jupyterhub.md", "## 4. Zero to JupyterHub values")
    for pod, where in (("singleuser", z2jh["singleuser"]["storage"]), ("hub", z2jh["hub"])):
        volume = next(v for v in where["extraVolumes"] if v["name"] == "raylab-config")
        assert volume["configMap"]["name"] == config, pod
        mount = next(m for m in where["extraVolumeMounts"] if m["name"] == "raylab-config")
        assert mount["mountPath"] == "/usr/local/etc/jupyter/jupyter_server_config.json", pod
        assert mount["subPath"] == "jupyter_server_config.json", pod
    hook = z2jh["hub"]["extraConfig"]["raylab-onboarding"]
    assert "c.KubeSpawner.pre_spawn_hook = raylab.onboarding.pre_spawn_hook" in hook


# ---------------------------------------------------------------- a real install


@pytest.fixture
def user_namespace(admin_api: k8s_client.ApiClient) -> Iterator[str]:
    """A user's namespace with a RayCluster, made before the chart (as onboarding will)."""
    with new_namespace(admin_api, "ray-user") as name:
        custom = k8s_client.CustomObjectsApi(admin_api)
        call_json(
            custom.create_namespaced_custom_object,
            "ray.io", "v1", name, "rayclusters", kwok_raycluster("kept"),
        )  # fmt: skip
        yield name


def test_install_upgrade_uninstall(
    helm: Helm,
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    namespace: str,
    user_namespace: str,
    tmp_path: Path,
) -> None:
    on_process_node = control_plane.process_nodes_unavailable is None
    values: dict[str, Any] = {
        "culler": {
            "namespaces": [user_namespace],
            # A process-node pod has a private /tmp: mount the settings there.
            "configDir": "/tmp/raylab-config",
            "interval": 5,
        }
    }
    if on_process_node:
        # Its container runs this machine's `raylab` (process nodes pull no image).
        values["culler"]["nodeSelector"] = {"raylab.io/process-node": "true"}
        values["culler"]["tolerations"] = [{"key": "raylab.io/process-node", "operator": "Exists"}]
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    before: dict[tuple[str, str], dict[str, Any]] = {}
    core = k8s_client.CoreV1Api(admin_api)
    helm.run("install", "raylab", CHART, "-n", namespace, "-f", path)
    try:
        docs = helm.template(namespace, "-f", path)
        for doc in docs:
            live = read(admin_api, doc)
            assert live is not None, f"{doc['kind']} {doc['metadata']['name']} not made"
            labels = live["metadata"]["labels"]
            assert labels["app.kubernetes.io/instance"] == "raylab"
            assert labels["app.kubernetes.io/managed-by"] == "Helm"
            assert labels["app.kubernetes.io/part-of"] == "raylab"
            before[(doc["kind"], doc["metadata"]["name"])] = live

        apps = k8s_client.AppsV1Api(admin_api)
        selector = "app.kubernetes.io/instance=raylab,app.kubernetes.io/component=culler"

        def culler_ready() -> bool:
            status = call_json(apps.read_namespaced_deployment, "raylab-culler", namespace)
            return status.get("status", {}).get("readyReplicas") == 1

        wait_until("the culler Ready", culler_ready, timeout=90)
        pod = call_json(core.list_namespaced_pod, namespace, label_selector=selector)["items"][0]
        if on_process_node:
            assert pod["spec"]["nodeName"] == "proc-cpu-0"

            # It really runs: /metrics answers (readiness), and it follows the namespace.
            def watching() -> bool:
                log = core.read_namespaced_pod_log(pod["metadata"]["name"], namespace)
                return f"watching {user_namespace}" in log

            wait_until("the culler watching the user's namespace", watching, timeout=60)

        # One value changes: the Deployment's command, nothing else.
        helm.run(
            "upgrade", "raylab", CHART, "-n", namespace, "-f", path,
            "--set", "culler.interval=7",
        )  # fmt: skip
        for (kind, name), old in before.items():
            new = read(admin_api, {**old, "kind": kind})
            assert new is not None, f"{kind} {name} gone after upgrade"
            assert new["metadata"]["uid"] == old["metadata"]["uid"], (kind, name)
            if kind == "Deployment":
                command = new["spec"]["template"]["spec"]["containers"][0]["command"]
                assert command[command.index("--interval") + 1] == "7"
            else:
                assert new["metadata"]["resourceVersion"] == old["metadata"]["resourceVersion"], (
                    f"{kind} {name} was written by an upgrade that does not change it"
                )
    finally:
        result = helm.run("uninstall", "raylab", "-n", namespace, "--wait", check=False)
    assert result.returncode == 0, result.stderr
    for (kind, name), old in before.items():
        assert read(admin_api, {**old, "kind": kind}) is None, f"{kind} {name} left behind"
    # What the chart did not make stays: the user's namespace and cluster.
    call_json(core.read_namespace, user_namespace)
    kept = call_json(
        k8s_client.CustomObjectsApi(admin_api).get_namespaced_custom_object,
        "ray.io", "v1", user_namespace, "rayclusters", "kept",
    )  # fmt: skip
    assert kept["metadata"].get("deletionTimestamp") is None
