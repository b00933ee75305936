"""Onboarding at spawn (raylab.onboarding) against the real test control plane, acting as
the hub's service account with the chart's ClusterRole <prefix>-onboarding.

- a never-seen user gets exactly their objects, labelled as raylab's; a second run
  writes nothing (resourceVersions stay); four replicas at once, in lockstep on every
  object, all succeed and make each object once;
- that user's new service account can then create a RayCluster through raylab's KubeRay
  backend in their new namespace (their first `up`);
- a username that is not a DNS label gets owner_label's namespace (through the
  pre_spawn_hook, with and without KubeSpawner's enable_user_namespaces);
- a pod in the user's own namespace (enable_user_namespaces) gets a copy of the chart's
  settings ConfigMap there, labelled as raylab's, brought back in line at each spawn; a
  missing ConfigMap fails the spawn naming it;
- least RBAC: without each verb of each rule of the chart's ClusterRole, onboarding
  fails naming the object and the rule; an admission policy's refusal of the quota,
  and a full quota of the hub's namespace, are named the same way.

The chart's objects are rendered with `helm template` and only its RBAC and its settings
ConfigMap are applied, with names of this module's own, so nothing here meets another
test's cluster-wide objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from kubernetes.client.exceptions import ApiException
from traitlets.config import Config

from raylab.backends.kuberay.backend import KubeRayBackend
from raylab.config import Settings
from raylab.errors import RaylabError
from raylab.identity import owner_label
from raylab.onboarding import (
    FIELD_MANAGER,
    OnboardingRefused,
    RaylabOnboarding,
    SpawnOnboarding,
    load,
    onboard,
    plan,
)
from raylab.onboarding.apply import object_path
from raylab.service import ClusterService

from .admin_support import client_with
from .kuberay_support import new_namespace
from .test_helm_chart import Helm

RUN = uuid.uuid4().hex[:5]
PREFIX = f"onb-{RUN}"  # the chart's fullnameOverride: its ClusterRoles are this module's
TEMPLATE = f"onb-{RUN}-{{username}}"  # users' namespaces
CLUSTER_QUEUE = f"onb-{RUN}"
POLICY_LABEL = "raylab-test/onboarding"  # on this module's users' namespaces


@dataclass
class Hub:
    """The hub as onboarding sees it: its account's client, the settings the chart
    wrote, its ClusterRole as rendered."""

    namespace: str
    account: str
    token: str
    settings: Settings
    onboarding: RaylabOnboarding
    role: dict[str, Any]
    config_role: dict[str, Any]  # the Role that reads the settings ConfigMap
    config_map: dict[str, Any]  # the chart's settings ConfigMap, as rendered
    config_dir: Path  # the chart's settings file, as the hub pod mounts it

    def api(self, admin_api: k8s_client.ApiClient) -> k8s_client.ApiClient:
        return client_with(admin_api, self.token)


def _rendered(helm: Helm, hub_namespace: str) -> list[dict[str, Any]]:
    flags = {"onboarding.enabled": "true", "kueue.enabled": "true", "culler.enabled": "false"}
    strings = {
        "fullnameOverride": PREFIX,
        "onboarding.hubServiceAccount.name": "hub",
        f"onboarding.namespaceLabels.{POLICY_LABEL}": RUN,
        "kueue.clusterQueue.name": CLUSTER_QUEUE,
        "settings.namespace_template": TEMPLATE,
    }
    args = [a for k, v in flags.items() for a in ("--set", f"{k}={v}")]
    args += [a for k, v in strings.items() for a in ("--set-string", f"{k}={v}")]
    return helm.template(hub_namespace, *args)


def _allowed(admin_api: k8s_client.ApiClient, user: str, verb: str, resource: str,
             group: str = "", name: str = "", namespace: str = "") -> bool:  # fmt: skip
    attributes = {"verb": verb, "resource": resource, "group": group, "name": name,
                  "namespace": namespace}  # fmt: skip
    review = {"spec": {"user": user, "resourceAttributes": attributes}}
    auth = k8s_client.AuthorizationV1Api(admin_api)
    return bool(call_json(auth.create_subject_access_review, review)["status"]["allowed"])


@pytest.fixture(scope="module")
def hub(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Hub]:
    control_plane.install_kueue_crds()  # LocalQueues need their API, not Kueue running
    helm = Helm(
        control_plane.binaries.helm,
        control_plane.kubeconfig("admin"),
        tmp_path_factory.mktemp("helm"),
    )
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    core = k8s_client.CoreV1Api(admin_api)
    with new_namespace(admin_api, f"onb-{RUN}-hub") as hub_ns:
        docs = _rendered(helm, hub_ns)
        roles = [d for d in docs if d["kind"] == "ClusterRole"]
        binding = next(d for d in docs if d["kind"] == "ClusterRoleBinding"
                       and d["metadata"]["name"] == f"{PREFIX}-onboarding")  # fmt: skip
        config_role = next(d for d in docs if d["kind"] == "Role")
        config_map = next(d for d in docs if d["kind"] == "ConfigMap")
        call_json(core.create_namespaced_service_account, hub_ns, {"metadata": {"name": "hub"}})
        for role in roles:
            call_json(rbac.create_cluster_role, role)
        call_json(rbac.create_cluster_role_binding, binding)
        # Namespaced, in the hub's namespace: gone with it.
        call_json(rbac.create_namespaced_role, hub_ns, config_role)
        call_json(rbac.create_namespaced_role_binding, hub_ns,
                  next(d for d in docs if d["kind"] == "RoleBinding"))  # fmt: skip
        call_json(core.create_namespaced_config_map, hub_ns, config_map)
        try:
            # The chart's settings file, read as the hook reads it in the hub pod.
            folder = tmp_path_factory.mktemp("jupyter-config")
            text = config_map["data"]["jupyter_server_config.json"]
            (folder / "jupyter_server_config.json").write_text(text)
            written = json.loads(text)["RaylabOnboarding"]
            assert set(written) <= set(RaylabOnboarding.class_traits(config=True))
            with pytest.MonkeyPatch.context() as mp:
                mp.setenv("JUPYTER_CONFIG_PATH", str(folder))
                settings, onboarding = load()
            assert onboarding.cluster_role == f"{PREFIX}-user"
            assert onboarding.cluster_queue == CLUSTER_QUEUE
            request = {"spec": {"expirationSeconds": 3600}}
            token = call_json(core.create_namespaced_service_account_token, "hub", hub_ns,
                              request)["status"]["token"]  # fmt: skip
            user = f"system:serviceaccount:{hub_ns}:hub"
            wait_until(
                "the hub may bind the users' ClusterRole",
                lambda: _allowed(admin_api, user, "bind", "clusterroles",
                                 "rbac.authorization.k8s.io", f"{PREFIX}-user"),
            )  # fmt: skip
            wait_until(
                "the hub may read the settings ConfigMap",
                lambda: _allowed(admin_api, user, "get", "configmaps", "", f"{PREFIX}-config",
                                 hub_ns),
            )  # fmt: skip
            role = next(r for r in roles if r["metadata"]["name"] == f"{PREFIX}-onboarding")
            yield Hub(hub_ns, user, token, settings, onboarding, role, config_role,
                      config_map, folder)  # fmt: skip
        finally:
            for role in roles:
                with contextlib.suppress(ApiException):
                    rbac.delete_cluster_role(role["metadata"]["name"])
            with contextlib.suppress(ApiException):
                rbac.delete_cluster_role_binding(binding["metadata"]["name"])
            # Onboarding never deletes; the test cleans up its users' namespaces.
            for ns in call_json(core.list_namespace)["items"]:
                name = ns["metadata"]["name"]
                if name.startswith(f"onb-{RUN}-") and name != hub_ns:
                    with contextlib.suppress(ApiException):
                        core.delete_namespace(name, propagation_policy="Background")


def _live(admin_api: k8s_client.ApiClient, manifest: dict[str, Any]) -> dict[str, Any]:
    method, url, headers, body, _ = admin_api.param_serialize(
        "GET", object_path(manifest), header_params={"Accept": "application/json"},
        auth_settings=["BearerToken"],
    )  # fmt: skip
    response = admin_api.call_api(method, url, header_params=headers, body=body)
    response.read()
    if response.status != 200:
        raise ApiException(http_resp=response)
    return json.loads(response.data)  # type: ignore[no-any-return]


def _versions(admin_api: k8s_client.ApiClient, user: str, hub: Hub) -> dict[str, str]:
    p = plan(user, hub.settings, hub.onboarding, hub.namespace)
    return {
        f"{m['kind']}/{m['metadata']['name']}": _live(admin_api, m)["metadata"]["resourceVersion"]
        for m in p.manifests
    }


def _quota_counted(admin_api: k8s_client.ApiClient, namespace: str) -> bool:
    """The quota controller writes the ResourceQuota's status once: wait for it, so that
    what changes afterwards is onboarding's doing."""
    core = k8s_client.CoreV1Api(admin_api)
    quota = call_json(core.read_namespaced_resource_quota, "raylab-user", namespace)
    return "used" in quota.get("status", {})


# ------------------------------------------------------------------------ the checks


def test_new_user_gets_exactly_their_objects(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    with hub.api(admin_api) as api:
        done = onboard(api, "alice", hub.settings, hub.onboarding, hub.namespace)
    namespace = TEMPLATE.format(username="alice")
    assert (done.namespace, done.service_account) == (namespace, "raylab-alice")
    assert done.objects == (
        f"Namespace {namespace}",
        f"ServiceAccount {hub.namespace}/raylab-alice",
        f"ResourceQuota {namespace}/raylab-user",
        f"LocalQueue {namespace}/team",
        f"RoleBinding {namespace}/{PREFIX}-user-alice",
    )
    core = k8s_client.CoreV1Api(admin_api)
    custom = k8s_client.CustomObjectsApi(admin_api)
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    selector = "app.kubernetes.io/managed-by=raylab,raylab.io/owner=alice"
    found = {
        "ServiceAccount": call_json(core.list_namespaced_service_account, hub.namespace,
                                    label_selector=selector)["items"],
        "ResourceQuota": call_json(core.list_namespaced_resource_quota, namespace,
                                   label_selector=selector)["items"],
        "LocalQueue": call_json(custom.list_namespaced_custom_object, "kueue.x-k8s.io",
                                "v1beta2", namespace, "localqueues",
                                label_selector=selector)["items"],
        "RoleBinding": call_json(rbac.list_namespaced_role_binding, namespace,
                                 label_selector=selector)["items"],
    }  # fmt: skip
    assert {k: len(v) for k, v in found.items()} == dict.fromkeys(found, 1)
    ns = call_json(core.read_namespace, namespace)
    assert ns["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "raylab"
    assert ns["metadata"]["labels"][POLICY_LABEL] == RUN  # onboarding.namespaceLabels
    assert ns["metadata"]["annotations"]["raylab.io/owner"] == "alice"
    quota = found["ResourceQuota"][0]["spec"]["hard"]
    assert quota == {"requests.nvidia.com/gpu": "16", "count/rayclusters.ray.io": "4"}
    assert found["LocalQueue"][0]["spec"]["clusterQueue"] == CLUSTER_QUEUE
    binding = found["RoleBinding"][0]
    assert binding["roleRef"]["name"] == f"{PREFIX}-user"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "raylab-alice", "namespace": hub.namespace}
    ]
    managers = {f["manager"] for f in binding["metadata"]["managedFields"]}
    assert managers == {FIELD_MANAGER}

    # A second spawn writes nothing.
    wait_until("the quota counted", lambda: _quota_counted(admin_api, namespace))
    before = _versions(admin_api, "alice", hub)
    with hub.api(admin_api) as api:
        again = onboard(api, "alice", hub.settings, hub.onboarding, hub.namespace)
    assert again == done
    assert _versions(admin_api, "alice", hub) == before


def test_replicas_at_once_make_each_object_once(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """Four hub replicas spawn carol at the same moment, in lockstep on every object:
    each object is applied by all four at once."""
    replicas = 4
    barrier = threading.Barrier(replicas, timeout=30)
    calls: list[str] = []

    def replica(_: int) -> Any:
        with hub.api(admin_api) as api:

            def together(manifest: dict[str, Any]) -> None:
                calls.append(manifest["kind"])
                barrier.wait()

            return onboard(api, "carol", hub.settings, hub.onboarding, hub.namespace,
                           before_apply=together)  # fmt: skip

    with ThreadPoolExecutor(replicas) as pool:
        results = list(pool.map(replica, range(replicas)))
    assert all(r == results[0] for r in results)
    assert len(calls) == replicas * len(results[0].objects)
    p = plan("carol", hub.settings, hub.onboarding, hub.namespace)
    for manifest in p.manifests:
        live = _live(admin_api, manifest)
        # Made once: one apply entry of the one manager, and nothing written after the
        # first (a losing replica's apply was a no-op).
        entries = [f for f in live["metadata"]["managedFields"] if f["manager"] == FIELD_MANAGER]
        assert [e["operation"] for e in entries] == ["Apply"], manifest["kind"]
    wait_until("the quota counted", lambda: _quota_counted(admin_api, p.namespace))
    before = _versions(admin_api, "carol", hub)
    with hub.api(admin_api) as api:
        onboard(api, "carol", hub.settings, hub.onboarding, hub.namespace)
    assert _versions(admin_api, "carol", hub) == before


def test_first_up_works(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """The user's new account, with nothing made by hand, creates a RayCluster through
    raylab's backend in their new namespace (queued in their LocalQueue)."""
    with hub.api(admin_api) as api:
        done = onboard(api, "dave", hub.settings, hub.onboarding, hub.namespace)
    core = k8s_client.CoreV1Api(admin_api)
    request = {"spec": {"expirationSeconds": 600}}
    token = call_json(core.create_namespaced_service_account_token, done.service_account,
                      hub.namespace, request)["status"]["token"]  # fmt: skip
    with client_with(admin_api, token) as user_api:
        backend = KubeRayBackend(hub.settings, api_client=user_api, namespace=done.namespace)
        service = ClusterService(backend, hub.settings, "dave")
        info, created = service.create({"name": "first", "workers": 0, "cpus": "1",
                                        "memory": "1Gi"})  # fmt: skip
    assert created
    assert info.namespace == done.namespace
    cluster = call_json(
        k8s_client.CustomObjectsApi(admin_api).get_namespaced_custom_object,
        "ray.io", "v1", done.namespace, "rayclusters", "first",
    )  # fmt: skip
    assert cluster["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team"


def test_unsafe_username_through_the_hook(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """A username that is not a DNS label gets owner_label's namespace and account, as
    the KubeRay backend resolves it; the hook points the spawner at them."""
    name = "Alice.Smith@example.org"
    safe = owner_label(name)
    assert safe != name.lower()
    with hub.api(admin_api) as api:
        hook = SpawnOnboarding(api)
        # KubeSpawner's attributes the hook reads and sets (KubeSpawner itself is not
        # installed here): pods in the hub's namespace.
        spawner = SimpleNamespace(user=SimpleNamespace(name=name), config=Config(),
                                  namespace=hub.namespace, enable_user_namespaces=False,
                                  service_account=None)  # fmt: skip
        with _config_path(hub):
            done = asyncio.run(hook(spawner))
        assert done.namespace == TEMPLATE.format(username=safe)
        assert spawner.service_account == f"raylab-{safe}" == done.service_account
        assert done.service_account_namespace == hub.namespace
        ns = call_json(k8s_client.CoreV1Api(admin_api).read_namespace, done.namespace)
        assert ns["metadata"]["labels"]["raylab.io/owner"] == safe
        assert ns["metadata"]["annotations"]["raylab.io/owner"] == name

        # enable_user_namespaces: the pod, hence its account, in the user's namespace;
        # the hub's own configuration (hub.config) comes before the file.
        spawner = SimpleNamespace(user=SimpleNamespace(name="Erin"), namespace="jhub-erin",
                                  enable_user_namespaces=True, service_account=None,
                                  config=Config({"RaylabOnboarding": {
                                      "service_account": "nb-{username}"}}))  # fmt: skip
        with _config_path(hub):
            done = asyncio.run(hook(spawner))
        erin = TEMPLATE.format(username=owner_label("Erin"))
        assert (spawner.namespace, spawner.service_account) == (erin, f"nb-{owner_label('Erin')}")
        assert done.service_account_namespace == erin
        call_json(k8s_client.CoreV1Api(admin_api).read_namespaced_service_account,
                  spawner.service_account, erin)  # fmt: skip
        # The pod there mounts the chart's settings from a copy beside it.
        assert f"ConfigMap {erin}/{PREFIX}-config" in done.objects


def test_pod_in_own_namespace_gets_the_settings(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """enable_user_namespaces: the user's pod cannot mount the chart's ConfigMap from the
    hub's namespace, so onboarding copies it beside the pod, as raylab's; a second spawn
    writes nothing, and a changed chart ConfigMap reaches the user at their next."""
    core = k8s_client.CoreV1Api(admin_api)
    name = f"{PREFIX}-config"
    with hub.api(admin_api) as api:
        done = onboard(api, "ivan", hub.settings, hub.onboarding)
    assert done.service_account_namespace == done.namespace
    assert f"ConfigMap {done.namespace}/{name}" in done.objects
    copy_ = call_json(core.read_namespaced_config_map, name, done.namespace)
    assert copy_["data"] == hub.config_map["data"]
    assert copy_["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "raylab",
        "raylab.io/owner": "ivan",
        "app.kubernetes.io/component": "onboarding",
    }
    assert copy_["metadata"]["annotations"]["raylab.io/owner"] == "ivan"
    with hub.api(admin_api) as api:
        onboard(api, "ivan", hub.settings, hub.onboarding)
    again = call_json(core.read_namespaced_config_map, name, done.namespace)
    assert again["metadata"]["resourceVersion"] == copy_["metadata"]["resourceVersion"]

    changed = copy.deepcopy(hub.config_map)
    changed["data"]["jupyter_server_config.json"] += "\n"
    call_json(core.replace_namespaced_config_map, name, hub.namespace, changed)
    try:
        with hub.api(admin_api) as api:
            onboard(api, "ivan", hub.settings, hub.onboarding)
        again = call_json(core.read_namespaced_config_map, name, done.namespace)
        assert again["data"] == changed["data"]
    finally:
        call_json(core.replace_namespaced_config_map, name, hub.namespace, hub.config_map)


def test_missing_settings_config_map_is_named(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """Without the chart's ConfigMap, a pod in the user's namespace would wait forever
    for its mount: the spawn fails instead, naming the ConfigMap and what to do."""
    core = k8s_client.CoreV1Api(admin_api)
    name = f"{PREFIX}-config"
    core.delete_namespaced_config_map(name, hub.namespace)
    try:
        with hub.api(admin_api) as api, pytest.raises(OnboardingRefused) as err:
            onboard(api, "judy", hub.settings, hub.onboarding)
    finally:
        call_json(core.create_namespaced_config_map, hub.namespace, hub.config_map)
    message = err.value.message
    judy = TEMPLATE.format(username="judy")
    assert f"could not read ConfigMap {hub.namespace}/{name}" in message, message
    assert f"to copy into namespace {judy}" in message
    assert "not found" in message
    assert f"Install the raylab Helm chart in namespace {hub.namespace}" in message


# ------------------------------------------------------------------- refusals, least RBAC


def _verbs_of(role: dict[str, Any]) -> list[tuple[int, str]]:
    return [(i, verb) for i, rule in enumerate(role["rules"]) for verb in rule["verbs"]]


def _replace(rbac: k8s_client.RbacAuthorizationV1Api, role: dict[str, Any]) -> None:
    name, namespace = role["metadata"]["name"], role["metadata"].get("namespace")
    if namespace:
        call_json(rbac.replace_namespaced_role, name, namespace, role)
    else:
        call_json(rbac.replace_cluster_role, name, role)


def _check(admin_api: k8s_client.ApiClient, hub: Hub, role: dict[str, Any], index: int,
           verb: str) -> tuple[Any, ...]:  # fmt: skip
    """_allowed's arguments for `verb` of the rule `index` of `role`, where it grants."""
    rule = role["rules"][index]
    target = rule.get("resourceNames", [""])[0]
    namespace = role["metadata"].get("namespace", "")
    return (admin_api, hub.account, verb, rule["resources"][0], rule["apiGroups"][0], target,
            namespace)  # fmt: skip


def test_each_rule_is_needed(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """Without any one verb of the chart's ClusterRole and Role, onboarding a new user
    whose pod runs in their own namespace (so every rule is used) fails, naming the
    object it could not make or read and the rule; with all of them it works."""
    rbac = k8s_client.RbacAuthorizationV1Api(admin_api)
    by_resource = {"namespaces": "Namespace", "serviceaccounts": "ServiceAccount",
                   "configmaps": "ConfigMap", "resourcequotas": "ResourceQuota",
                   "localqueues": "LocalQueue", "rolebindings": "RoleBinding",
                   "clusterroles": "RoleBinding"}  # fmt: skip
    roles = (hub.role, hub.config_role)
    steps = [(role, index, verb) for role in roles for index, verb in _verbs_of(role)]
    # create and patch on six resources, bind, and get of the settings ConfigMap
    assert len(steps) == 14
    restore: tuple[dict[str, Any], tuple[Any, ...]] | None = None
    try:
        for n, (original, index, verb) in enumerate(steps):
            if restore is not None and restore[0] is not original:
                # The other role whole again, before this one loses a verb.
                _replace(rbac, restore[0])
                wait_until("the hub's rights back", lambda c=restore[1]: _allowed(*c))
            role = copy.deepcopy(original)
            rule = role["rules"][index]
            rule["verbs"] = [v for v in rule["verbs"] if v != verb]
            if not rule["verbs"]:
                del role["rules"][index]
            _replace(rbac, role)
            check = _check(admin_api, hub, original, index, verb)
            resource = check[3]
            wait_until(f"the hub without {verb} {resource}",
                       lambda c=check: not _allowed(*c), timeout=30, interval=0.05)  # fmt: skip
            restore = (original, check)
            user = f"least{n}"
            with hub.api(admin_api) as api, pytest.raises(OnboardingRefused) as err:
                onboard(api, user, hub.settings, hub.onboarding)
            refused = err.value
            assert refused.kind == by_resource[resource], (verb, resource, refused.message)
            assert f"{refused.kind} " in refused.message
            assert f"/{refused.name}" in refused.message or refused.kind == "Namespace"
            if verb == "bind":
                assert f"'bind' on clusterroles/{PREFIX}-user" in refused.message
            else:
                assert f'cannot {verb} resource "{resource}"' in refused.message, refused.message
    finally:
        for role in roles:
            _replace(rbac, role)
    for role in roles:
        back = _check(admin_api, hub, role, *_verbs_of(role)[-1])
        wait_until("the hub's rights back", lambda c=back: _allowed(*c))
    with hub.api(admin_api) as api:
        onboard(api, "least-done", hub.settings, hub.onboarding)


def test_admission_refusal_names_the_quota(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """A ValidatingAdmissionPolicy that allows at most 8 GPUs per user's namespace
    refuses the chart's quota of 16: the spawn fails naming the quota and the policy."""
    admission = k8s_client.AdmissionregistrationV1Api(admin_api)
    policy_name = f"onb-{RUN}-gpus"
    policy = {
        "metadata": {"name": policy_name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["resourcequotas"]}]},
            "validations": [{
                "expression": "!has(object.spec.hard) || "
                              "!('requests.nvidia.com/gpu' in object.spec.hard) || "
                              "quantity(string(object.spec.hard['requests.nvidia.com/gpu']))"
                              ".compareTo(quantity('8')) <= 0",
                "message": "at most 8 GPUs per user",
            }],
        },
    }  # fmt: skip
    binding = {
        "metadata": {"name": policy_name},
        "spec": {
            "policyName": policy_name,
            "validationActions": ["Deny"],
            "matchResources": {"namespaceSelector": {"matchLabels": {POLICY_LABEL: RUN}}},
        },
    }
    call_json(admission.create_validating_admission_policy, policy)
    call_json(admission.create_validating_admission_policy_binding, binding)
    try:
        with new_namespace(admin_api, f"onb-{RUN}-probe", labels={POLICY_LABEL: RUN}) as probe:
            core = k8s_client.CoreV1Api(admin_api)
            quota = {"metadata": {"name": "probe"},
                     "spec": {"hard": {"requests.nvidia.com/gpu": "16"}}}  # fmt: skip

            def in_force() -> bool:
                try:
                    core.create_namespaced_resource_quota(probe, quota, dry_run="All")
                except ApiException as exc:
                    return "at most 8 GPUs" in str(exc.body)
                return False

            wait_until("the admission policy in force", in_force, timeout=30)
        with hub.api(admin_api) as api, pytest.raises(OnboardingRefused) as err:
            onboard(api, "frank", hub.settings, hub.onboarding, hub.namespace)
    finally:
        with contextlib.suppress(ApiException):
            admission.delete_validating_admission_policy_binding(policy_name)
        with contextlib.suppress(ApiException):
            admission.delete_validating_admission_policy(policy_name)
    namespace = TEMPLATE.format(username="frank")
    assert err.value.kind == "ResourceQuota"
    assert f"ResourceQuota {namespace}/raylab-user" in err.value.message
    assert policy_name in err.value.message
    assert "at most 8 GPUs per user" in err.value.message


def test_quota_refusal_names_the_account(hub: Hub, admin_api: k8s_client.ApiClient) -> None:
    """A ResourceQuota of the hub's namespace with no room for one more service account:
    the spawn fails naming the account and the quota."""
    core = k8s_client.CoreV1Api(admin_api)
    accounts = call_json(core.list_namespaced_service_account, hub.namespace)["items"]
    quota = {
        "metadata": {"name": "accounts"},
        "spec": {"hard": {"count/serviceaccounts": str(len(accounts))}},
    }
    call_json(core.create_namespaced_resource_quota, hub.namespace, quota)
    try:

        def counted() -> bool:
            got = call_json(core.read_namespaced_resource_quota, "accounts", hub.namespace)
            return "used" in got.get("status", {})

        wait_until("the hub namespace's quota counted", counted)
        with hub.api(admin_api) as api, pytest.raises(OnboardingRefused) as err:
            onboard(api, "heidi", hub.settings, hub.onboarding, hub.namespace)
    finally:
        core.delete_namespaced_resource_quota("accounts", hub.namespace)
    assert err.value.kind == "ServiceAccount"
    assert f"ServiceAccount {hub.namespace}/raylab-heidi" in err.value.message
    assert "exceeded quota: accounts" in err.value.message


def test_plan_without_queue_or_username(hub: Hub) -> None:
    """No ClusterQueue: no LocalQueue; a template without {username} (one namespace for
    everyone) is refused before any request."""
    onboarding = RaylabOnboarding(config=Config({"RaylabOnboarding": {"cluster_queue": ""}}))
    kinds = [m["kind"] for m in plan("gina", hub.settings, onboarding).manifests]
    assert "LocalQueue" not in kinds
    shared = Settings.from_config(namespace_template="ray-shared")
    with pytest.raises(RaylabError, match=r"has no \{username\}"):
        plan("gina", shared, onboarding)


def test_plan_settings_copy_in_a_shared_namespace(hub: Hub) -> None:
    """Pods of every user in one namespace that is not the chart's: one copy for all,
    with raylab's labels but no owner (each user's spawn applies the same object)."""
    shared = plan("gina", hub.settings, hub.onboarding, "notebooks", {"data": {"k": "v"}})
    copied = next(m for m in shared.manifests if m["kind"] == "ConfigMap")
    assert copied["metadata"]["namespace"] == "notebooks"
    assert copied["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "raylab",
        "app.kubernetes.io/component": "onboarding",
    }
    assert "annotations" not in copied["metadata"]
    assert copied["data"] == {"k": "v"}


# ---------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def _config_path(hub: Hub) -> Iterator[None]:
    """The chart's settings file on Jupyter's config path, as in the hub pod."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_CONFIG_PATH", str(hub.config_dir))
        yield
