"""An exported pipeline runs its job on KubeRay, end to end.

The notebook tests/export/notebooks/gpu_train.ipynb runs unchanged in a real kernel: its
`%raycluster up` goes to KubeRay because the deployment's config says so, and its
cluster's pods run Ray on the process nodes (harness/processnodes.py). `raylab export
--cluster` makes the Dagster project from it; pip installs the project into a fresh
environment (tests/export/support.py); the token Secret and the Role its EXPORT.md asks
for are applied as written there. Then the job runs as its schedule runs it, as the
pipeline's own service account, with RAYLAB_RAY_BACKEND=kuberay: dagster-ray creates a
RayJob, KubeRay its cluster on the process nodes, and Ray Client reaches the head
through the head Service's cluster DNS name (the run resolves names as a Dagster run pod
would). The job's last asset must equal what the notebook showed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import nbformat
import yaml
from controlplane import ControlPlane, call_json, wait_until
from kubernetes import client as k8s_client
from nbclient import NotebookClient
from processnodes import PROCESS_GPU_TYPE, process_profile, resolving_env

from tests.export.support import NOTEBOOKS, FreshEnv, last_shown

from .admin_support import account_token, kubeconfig_with
from .kuberay_support import RAY, grant, new_namespace, user_kubeconfig

NOTEBOOK = "gpu_train"
CLUSTER = "exp-nb"  # the name the notebook's `%raycluster up` uses
RUNS = "pipeline-runs"  # the service account the pipeline's runs use


# The job as its schedule runs it (the schedule's run config), with the definitions'
# resources: RAYLAB_RAY_BACKEND=kuberay makes `ray_cluster` a RayJob per step. In process,
# so that the result's values are at hand (`dagster job execute` would initialize the
# resources again after the run to build its result: a second RayJob).
SCHEDULED_RUN = f"""\
import json
from IPython.lib.pretty import pretty
from {NOTEBOOK}.definitions import SCHEDULE_RUN_CONFIG, defs
job = defs.resolve_job_def("{NOTEBOOK}_job")
result = job.execute_in_process(run_config=SCHEDULE_RUN_CONFIG)
last = job.nodes_in_topological_order[-1].name
print(json.dumps(pretty(result.output_for_node(last))))
"""


def write_config(config_dir: Path) -> None:
    """The deployment's jupyter_server_config.py: KubeRay, on the process nodes."""
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "jupyter_server_config.py").write_text(
        'c.Raylab.backend = "kuberay"\n'
        f"c.Raylab.gpu_types = {{{PROCESS_GPU_TYPE!r}: {process_profile()!r}}}\n"
        f"c.Raylab.default_gpu_type = {PROCESS_GPU_TYPE!r}\n"
        "c.Raylab.max_gpus_per_user = 16\n"
        "c.Raylab.wait_timeout = 300.0\n"
    )


def documented(export_md: str) -> tuple[dict[str, Any], str]:
    """The Role and the token Secret's name that the project's EXPORT.md asks for."""
    blocks = [part.split("```", 1)[0] for part in export_md.split("```yaml\n")[1:]]
    (role,) = [doc for doc in map(yaml.safe_load, blocks) if doc.get("kind") == "Role"]
    secret = re.search(r"create secret generic (\S+) --from-literal=auth_token=", export_md)
    assert secret, export_md
    return role, secret.group(1)


def run_identity(admin: k8s_client.ApiClient, namespace: str, role: dict[str, Any]) -> str:
    """A service account bound to the Role, as the pipeline's runs get one; its token."""
    token = account_token(admin, namespace, RUNS)
    rbac = k8s_client.RbacAuthorizationV1Api(admin)
    call_json(rbac.create_namespaced_role, namespace, role)
    call_json(rbac.create_namespaced_role_binding, namespace, {
        "metadata": {"name": RUNS},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": role["metadata"]["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": RUNS, "namespace": namespace}],
    })  # fmt: skip
    asked = {"namespace": namespace, "verb": "create", "group": "ray.io", "resource": "rayjobs"}
    review = {"spec": {"user": f"system:serviceaccount:{namespace}:{RUNS}",
                       "resourceAttributes": asked}}  # fmt: skip
    authz = k8s_client.AuthorizationV1Api(admin)

    def allowed() -> bool:
        return bool(call_json(authz.create_subject_access_review, review)["status"].get("allowed"))

    wait_until("the runs' Role applies", allowed, timeout=30)
    return token


def cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "raylab.cli", *args, "--backend", "kuberay"],
                          capture_output=True, text=True, env=env, timeout=600)  # fmt: skip


def test_the_exported_pipeline_runs_its_job_on_kuberay(
    control_plane: ControlPlane,
    admin_api: k8s_client.ApiClient,
    process_nodes: list[str],
    tmp_path: Path,
    pipeline_base: Path,
) -> None:
    with new_namespace(admin_api, "exp-e2e") as namespace:
        grant(admin_api, namespace, "alice")
        kubeconfig = user_kubeconfig(control_plane.kubeconfig("alice"), namespace,
                                     tmp_path / "alice.kubeconfig")  # fmt: skip
        write_config(tmp_path / "jupyter")
        # alice's kernel, on a laptop (no KUBERNETES_SERVICE_HOST).
        alice = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        alice.update(KUBECONFIG=str(kubeconfig), JUPYTERHUB_USER="alice",
                     JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter"))  # fmt: skip
        original = tmp_path / f"{NOTEBOOK}.ipynb"
        shutil.copy(NOTEBOOKS / original.name, original)
        nb = nbformat.read(str(original), as_version=4)
        try:
            where = {"metadata": {"path": str(tmp_path)}}
            kernel = NotebookClient(nb, timeout=600, kernel_name="python3", resources=where)
            kernel.execute(env=alice)
            up = "".join(o.get("text", "") for o in nb.cells[1].outputs)
            assert f"Connected this kernel to {CLUSTER} (ray://127.0.0.1:" in up, up
            expected = last_shown(nb)
            assert "'mode': 'offline'" in expected
            assert "'gpus': ['0', '1']" in expected  # two GPU actors, one GPU each
            nbformat.write(nb, str(original))
            exported = cli(alice, "export", str(original), "--cluster", CLUSTER)
            assert exported.returncode == 0, exported.stdout + exported.stderr
        finally:
            downed = cli(alice, "down", CLUSTER)
        assert downed.returncode == 0, downed.stdout + downed.stderr
        project = tmp_path / f"{NOTEBOOK}_pipeline"
        # Its Out[] shows `%env RUN_MODE=offline`'s value: not copied into the project
        # (it may as well be a secret); the run below must still produce it.
        assert not (project / "tests" / "notebook_result.txt").exists()
        assert "shows a value the notebook wrote" in (project / "EXPORT.md").read_text()

        role, secret = documented((project / "EXPORT.md").read_text())
        assert role["metadata"]["namespace"] == namespace  # the cluster's, from the export
        token = secrets.token_hex(32)
        core = k8s_client.CoreV1Api(admin_api)
        call_json(core.create_namespaced_secret, namespace, {
            "metadata": {"name": secret}, "stringData": {"auth_token": token}})  # fmt: skip
        runs = kubeconfig_with(control_plane, run_identity(admin_api, namespace, role),
                               namespace, tmp_path / "runs.kubeconfig")  # fmt: skip

        fresh = FreshEnv(tmp_path / "venv", pipeline_base)
        fresh.install(project)
        env = fresh.env(KUBECONFIG=str(runs), RUN_MODE="offline", RAYLAB_RAY_BACKEND="kuberay",
                        RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token)  # fmt: skip
        env.pop("KUBERNETES_SERVICE_HOST", None)
        run = subprocess.run([*resolving_env(tmp_path), str(fresh.python), "-c", SCHEDULED_RUN],
                             cwd=project, env=env, capture_output=True, text=True,
                             timeout=900)  # fmt: skip
        log = run.stdout + run.stderr
        (tmp_path / "dagster-run.log").write_text(log)
        assert run.returncode == 0, log
        assert "RUN_SUCCESS" in log, log
        # What the job's last asset is, is what the notebook showed.
        assert json.dumps(expected) in run.stdout.splitlines(), log

        # The step ran on a RayJob that the run made (and KubeRay's cluster for it).
        custom = k8s_client.CustomObjectsApi(admin_api)
        rayjobs = call_json(custom.list_namespaced_custom_object, *RAY, namespace, "rayjobs")
        names = sorted(j["metadata"]["name"] for j in rayjobs["items"])
        told = sorted(re.findall(rf"Created RayJob {namespace}/(\S+)\.", log))
        assert names == told, (names, log)
        assert len(names) == 1, (names, log)
        assert f"RayJob {namespace}/{names[0]} has created a RayCluster" in log, log
