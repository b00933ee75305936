"""The cluster runs the notebook's own code and packages (real Ray, local backend).

One cluster serves the module (a Ray cluster takes ~20 s here); the tests run in file
order, as a user's session would. The "kernel" is this process with a notebook folder as
its working directory, a wheel and an editable project installed where only it sees them
(tests/local/packages.py): the workers run the same Python, so they can import those
only because raylab ships them.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import site
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from IPython.core.error import UsageError
from IPython.core.interactiveshell import InteractiveShell

from raylab.config import Settings
from raylab.identity import current_user
from raylab.kernel.connect import connected_cluster, disconnect
from raylab.server.cache import cluster_json
from raylab.service import ClusterService
from raylab.sync.values import EnvValues

from .packages import build_wheel, install_editable, install_wheel, make_project

NAME = "renv"
SECRET = "s3cret-value-42"
SHIPPED = {  # what the notebook folder ships: everything else there is left out
    ".gitignore",
    ".rayignore",
    "data/input.txt",
    "mylib/__init__.py",
    "mylib/model.py",
    "sub/.gitignore",
    "sub/keep.py",
}


def run(shell: InteractiveShell, line: str) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        shell.run_line_magic("raycluster", line)
    return out.getvalue(), err.getvalue()


def on_cluster(fn: Any, *args: Any) -> Any:
    import ray

    return ray.get(ray.remote(fn).remote(*args), timeout=120)


def write(root: Path, files: dict[str, str | bytes]) -> None:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)


@pytest.fixture(scope="module")
def notebook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("notebook")
    write(
        root,
        {
            "mylib/__init__.py": "VALUE = 1\n",
            "mylib/model.py": "class Net:\n    def forward(self, x):\n        return x * 2\n",
            "data/input.txt": "hello from the notebook folder\n",
            ".gitignore": "secret.txt\nlogs/\n",
            ".rayignore": "big/\n",
            "secret.txt": "not for the cluster\n",
            "logs/run.log": "x\n",
            "big/blob.bin": b"\0" * 4096,
            "node_modules/left/index.js": "x\n",
            "envs/py/pyvenv.cfg": "home = /usr\n",  # a virtual environment of any name
            "envs/py/lib/site.py": "x\n",
            "ckpts/epoch1.ckpt": b"\0" * 1024,  # left out with --exclude
            ".ipynb_checkpoints/nb-checkpoint.ipynb": "{}\n",
            "mylib/__pycache__/x.pyc": b"\0",
            "sub/.gitignore": "*.tmp\n",
            "sub/a.tmp": "x\n",
            "sub/keep.py": "KEEP = True\n",
        },
    )
    return root


@pytest.fixture(scope="module")
def packages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    """wheelpkg 1.0 (from a wheel built here) and editpkg (editable) in the kernel only."""
    root = tmp_path_factory.mktemp("packages")
    before = list(sys.path)
    wheel = build_wheel(
        make_project(root, "wheelpkg", "1.0", "WHO = 'wheelpkg from a local wheel'\n"),
        root / "dist",
    )
    editable = make_project(root, "editpkg", "0.3", "WHO = 'editpkg, first edit'\n")
    install_wheel(wheel, root / "kernel-site")
    install_editable(editable, root / "kernel-prefix")
    # Version 2.0 of a package the kernel has as 1.0: the drift test ships it with --pip.
    drift_new = build_wheel(make_project(root, "driftpkg", "2.0", "V = 2\n"), root / "dist2")
    install_wheel(build_wheel(make_project(root, "driftpkg", "1.0", "V = 1\n"), root / "dist1"),
                  root / "kernel-site-drift")  # fmt: skip
    try:
        yield {"wheel": wheel, "editable": editable, "drift_new": drift_new, "root": root}
    finally:
        sys.path[:] = before


@pytest.fixture(scope="module")
def shell(notebook: Path, packages: dict[str, Path]) -> Iterator[InteractiveShell]:
    ip = InteractiveShell.instance()
    ip.run_line_magic("load_ext", "raylab")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(notebook)  # a kernel runs in its notebook's folder
        yield ip


@pytest.fixture(scope="module")
def up(shell: InteractiveShell) -> Iterator[tuple[str, str]]:
    try:
        yield run(
            shell,
            f"up --name {NAME} --workers 1 --cpus 1 --memory 1Gi --gpus 0 --gpu-type cpu "
            f"--exclude ckpts/ --env GREETING=hi --env TOKEN={SECRET}",
        )
    finally:
        with contextlib.suppress(UsageError):
            run(shell, f"down {NAME}")


def service() -> ClusterService:
    settings = Settings.load()
    from raylab.backends import make_backend

    return ClusterService(make_backend("local", settings), settings, current_user())


# --- the working directory ------------------------------------------------------------


def test_up_ships_the_notebook_folder(up: tuple[str, str]) -> None:
    out, _ = up
    assert connected_cluster() == NAME
    connected = next(ln for ln in out.splitlines() if ln.startswith("Connected this kernel"))
    assert " with working dir " in connected
    assert "3 local packages · 2 env vars; use ray.remote as usual." in connected

    def task() -> tuple[int, str, int]:
        import mylib
        from mylib.model import Net

        with open("data/input.txt") as fh:  # the same relative path as in the kernel
            return mylib.VALUE, fh.read(), Net().forward(21)

    assert on_cluster(task) == (1, "hello from the notebook folder\n", 42)


def test_actors_import_the_notebook_code_too(up: tuple[str, str]) -> None:
    import ray

    @ray.remote
    class Model:
        def __init__(self) -> None:
            from mylib.model import Net

            self.net = Net()

        def run(self, x: int) -> int:
            return int(self.net.forward(x))

    actor = Model.remote()  # type: ignore[attr-defined]
    assert ray.get(actor.run.remote(5), timeout=120) == 10
    ray.kill(actor)


def test_ignored_files_are_not_uploaded(up: tuple[str, str]) -> None:
    def received() -> list[str]:
        import os

        out = []
        for top, _, files in os.walk("."):
            out += [os.path.relpath(os.path.join(top, f), ".") for f in files]
        return sorted(out)

    assert set(on_cluster(received)) == SHIPPED
    env = service().get(NAME).environment
    assert env is not None
    assert env.working_dir_files == len(SHIPPED)
    assert env.excludes == ("ckpts/",)


# --- packages -----------------------------------------------------------------------


def test_a_wheel_and_an_editable_install_reach_the_workers(up: tuple[str, str]) -> None:
    def task() -> dict[str, str]:
        from importlib.metadata import version

        import editpkg
        import wheelpkg

        return {
            "wheelpkg": wheelpkg.WHO,
            "editpkg": editpkg.WHO,
            "wheel version": version("wheelpkg"),
            "editable version": version("editpkg"),
            "from": wheelpkg.__file__,
        }

    got = on_cluster(task)
    assert got["wheelpkg"] == "wheelpkg from a local wheel"
    assert got["editpkg"] == "editpkg, first edit"
    assert (got["wheel version"], got["editable version"]) == ("1.0", "0.3")
    assert "runtime_resources" in got["from"]  # shipped by Ray, not found by chance
    env = service().get(NAME).environment
    assert env is not None
    assert env.local_packages == ("driftpkg", "editpkg", "wheelpkg")


# --- environment variables --------------------------------------------------------------


def test_env_vars_reach_workers_and_values_show_nowhere(
    shell: InteractiveShell, up: tuple[str, str], state_dir: Path
) -> None:
    def task() -> tuple[str, str]:
        import os

        return os.environ["GREETING"], os.environ["TOKEN"]

    assert on_cluster(task) == ("hi", SECRET)
    out, err = up
    status, _ = run(shell, f"status {NAME}")
    listing, _ = run(shell, "list")
    info = service().get(NAME)
    assert info.environment is not None
    assert info.environment.env_names == ("GREETING", "TOKEN")
    assert "2 env vars" in status
    shown = [out, err, status, listing, json.dumps(cluster_json(info))]
    shown += [p.read_text(errors="replace") for p in (state_dir / NAME).iterdir() if p.is_file()]
    assert not [s for s in shown if SECRET in s]
    values = EnvValues.default().path(info)
    assert stat.S_IMODE(values.stat().st_mode) == 0o600
    assert stat.S_IMODE(values.parent.stat().st_mode) == 0o700
    # Nor in what Ray keeps or shows: its logs (the runtime-env agent's, the Ray Client
    # server's) and any process's command line; the workers read it from a 0600 file.
    for handoff in values.parent.glob(f"{values.stem}.workers-*.json"):
        assert stat.S_IMODE(handoff.stat().st_mode) == 0o600
    nodes = json.loads((state_dir / NAME / "cluster.json").read_text())["nodes"]
    logs = [f for n in nodes for f in Path(n["temp_dir"]).rglob("*.log") if f.is_file()]
    logs += [f for n in nodes for f in Path(n["temp_dir"]).rglob("*.err") if f.is_file()]
    assert any("runtime_env_agent" in f.name for f in logs), logs
    assert [f for f in logs if SECRET.encode() in f.read_bytes()] == []
    cmdlines = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdlines.append(" ".join(proc.info["cmdline"] or ()))
    assert [c for c in cmdlines if SECRET in c] == []


# --- keeping in step ----------------------------------------------------------------------


def test_after_an_edit_a_reconnect_runs_the_new_code(
    shell: InteractiveShell, up: tuple[str, str], notebook: Path, packages: dict[str, Path]
) -> None:
    (notebook / "mylib" / "__init__.py").write_text("VALUE = 2\n")
    (packages["editable"] / "src" / "editpkg" / "__init__.py").write_text("WHO = 'edited'\n")
    out, _ = run(shell, f"connect {NAME}")
    assert f"Connected this kernel to {NAME}" in out

    def task() -> tuple[int, str]:
        import editpkg
        import mylib

        return mylib.VALUE, editpkg.WHO

    assert on_cluster(task) == (2, "edited")


def test_a_second_kernel_gets_the_same_environment(up: tuple[str, str], tmp_path: Path) -> None:
    """Another kernel, elsewhere: the sidebar's Connect runs the same `%raycluster connect`."""
    script = textwrap.dedent(
        f"""
        import json, os
        from IPython.core.interactiveshell import InteractiveShell
        ip = InteractiveShell.instance()
        ip.run_line_magic("load_ext", "raylab")
        ip.run_line_magic("raycluster", "connect {NAME}")
        import ray

        @ray.remote
        def task():
            import os, mylib
            return mylib.VALUE, os.environ["TOKEN"], sorted(os.listdir("data"))

        print("RESULT " + json.dumps(ray.get(task.remote(), timeout=120)))
        """
    )
    other = tmp_path / "another-notebook-folder"
    other.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=other, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
    result = next(ln for ln in done.stdout.splitlines() if ln.startswith("RESULT "))
    assert json.loads(result[7:]) == [2, SECRET, ["input.txt"]]
    # Its own kernel lacks the wheel and the editable project: it says so, in one line.
    assert "not installed in this kernel, so not shipped: driftpkg, editpkg, wheelpkg" in (
        done.stderr
    )


def test_drift_warns_for_an_imported_package_of_another_minor(
    shell: InteractiveShell, up: tuple[str, str], packages: dict[str, Path]
) -> None:
    shell.run_cell("import driftpkg", store_history=True)  # 1.0 in this kernel
    _, err = run(shell, f"connect {NAME} --pip {packages['drift_new']}")
    assert "driftpkg 1.0 in this kernel, 2.0 on the cluster" in err

    def task() -> int:
        import driftpkg

        return int(driftpkg.V)

    assert on_cluster(task) == 2
    info = service().get(NAME)
    assert info.environment is not None
    assert info.environment.wheels == (str(packages["drift_new"]),)
    assert "driftpkg" not in info.environment.local_packages  # named with --pip: that one


def test_pip_install_verb_installs_in_the_kernel_and_ships(
    shell: InteractiveShell, up: tuple[str, str], packages: dict[str, Path]
) -> None:
    root = packages["root"]
    wheel = build_wheel(make_project(root, "pipverbpkg", "0.1", "OK = 'verb'\n"), root / "d3")
    target = root / "pip-verb-site"
    target.mkdir()
    site.addsitedir(str(target))  # where this kernel's pip installs it (see packages.py)
    out, _ = run(shell, f"pip install --no-index --no-deps --target {target} {wheel}")
    assert "Added the new local packages to renv's environment and reconnected" in out
    import pipverbpkg  # in the kernel

    def task() -> str:
        import pipverbpkg

        return str(pipverbpkg.OK)

    assert pipverbpkg.OK == on_cluster(task) == "verb"


def test_sync_pip_makes_a_plain_pip_install_reach_the_cluster(
    shell: InteractiveShell, up: tuple[str, str], packages: dict[str, Path]
) -> None:
    root = packages["root"]
    wheel = build_wheel(make_project(root, "syncpkg", "0.1", "OK = 'synced'\n"), root / "d4")
    target = root / "sync-site"
    target.mkdir()
    site.addsitedir(str(target))
    magics = shell.magics_manager.registry["RayclusterMagics"]
    magics.commands._settings = Settings.from_config(None, sync_pip=True)  # c.Raylab.sync_pip
    try:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            shell.run_cell(f"%pip install --no-index --no-deps --target {target} {wheel}")
    finally:
        magics.commands._settings = None
    assert "Added the new local packages to renv's environment" in out.getvalue()

    def task() -> str:
        import syncpkg

        return str(syncpkg.OK)

    assert on_cluster(task) == "synced"


def test_the_export_carries_the_environment(
    shell: InteractiveShell, up: tuple[str, str], tmp_path: Path, pipeline_base: Path
) -> None:
    from tests.export.support import FreshEnv, make_notebook, read_tree

    notebook = make_notebook(tmp_path / "analysis.ipynb", [
        "import mylib\nimport wheelpkg\nfrom mylib.model import Net",
        "import ray\n\n@ray.remote\ndef f(x):\n    return Net().forward(x) + mylib.VALUE",
        "ray.get(f.remote(1))",
    ])  # fmt: skip
    project = tmp_path / "analysis_pipeline"
    out, err = run(shell, f"export {notebook} --out {project}")
    assert "Exported analysis.ipynb" in out, out + err
    files = read_tree(project)
    assert {"mylib/__init__.py", "mylib/model.py", "wheelpkg/__init__.py", "editpkg/__init__.py",
            "driftpkg/__init__.py"} <= set(files)  # fmt: skip
    assert not [f for f in files if f.startswith(("data/", "sub/")) or ".dist-info" in f]
    cluster = files["analysis/cluster.py"]
    assert 'ENV_VARS = ["GREETING", "TOKEN"]' in cluster
    assert '"mylib"' in cluster.split("MODULES = ", 1)[1]
    assert not [f for f, text in files.items() if SECRET in text]
    assert "## From the cluster's environment" in files["EXPORT.md"]
    # Installed elsewhere, the project imports the notebook's modules by itself.
    fresh = FreshEnv(tmp_path / "venv", pipeline_base)
    fresh.install(project)
    done = fresh.run(
        "-c",
        "from analysis import resources; import mylib, wheelpkg; "
        "print(sorted(m.__name__ for m in resources.runtime_env(production=False)"
        "['py_modules'][1:]))",
        cwd=tmp_path / "venv",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    shipped = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert {"mylib", "wheelpkg", "editpkg", "driftpkg"} <= set(shipped)


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("--requirements missing.txt", "--requirements: 'missing.txt' does not exist"),
        ("--env 1BAD=x", "--env: '1BAD' is not a variable name"),
        ("--env NOVALUE_SET_ANYWHERE", "--env: NOVALUE_SET_ANYWHERE has no value"),
        ("--working-dir /no/such/folder", "--working-dir: '/no/such/folder' does not exist"),
        (
            "--pip ./missing-1.0-py3-none-any.whl",
            "--pip: './missing-1.0-py3-none-any.whl' does not exist",
        ),
    ],
)
def test_bad_input_is_one_message_and_changes_nothing(
    shell: InteractiveShell, up: tuple[str, str], options: str, message: str
) -> None:
    disconnect()
    before = service().get(NAME).environment
    with pytest.raises(UsageError) as raised:
        run(shell, f"connect {NAME} {options}")
    assert str(raised.value).startswith(message), str(raised.value)
    assert "\n" not in str(raised.value)
    assert connected_cluster() is None
    assert service().get(NAME).environment == before
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        run(shell, f"up --name renv-bad {options}")
    assert [c.name for c in service().list()] == [NAME]  # nothing created


def test_a_folder_over_the_cap_is_refused_with_its_largest_files(
    up: tuple[str, str], tmp_path: Path
) -> None:
    from raylab.commands import Commands
    from raylab.errors import RaylabError
    from raylab.magics import NotebookOutput

    write(tmp_path, {"model.bin": b"\0" * (3 << 19), "data/a.bin": b"\0" * (1 << 19), "x.py": ""})
    settings = Settings.from_config(None, working_dir_max_mib=1)
    commands = Commands(NotebookOutput(), prog="%raycluster", may_connect=True, settings=settings)
    disconnect()
    with pytest.raises(RaylabError) as raised:
        commands.run_line(f"connect {NAME} --working-dir {tmp_path}")
    assert raised.value.message == (
        f"the working directory {tmp_path.resolve()} holds 2.0 MiB to ship, over the 1.0 MiB "
        "limit; largest files: model.bin (1.5 MiB), data/a.bin (512.0 KiB), x.py (0 B)"
    )
    assert ".rayignore" in (raised.value.detail or "")
    assert connected_cluster() is None


def test_down_forgets_the_values(shell: InteractiveShell, up: tuple[str, str]) -> None:
    info = service().get(NAME)
    values = EnvValues.default().path(info)
    assert values.is_file()
    assert list(values.parent.glob(f"{values.stem}.workers-*.json"))
    out, _ = run(shell, f"down {NAME}")
    assert out.strip() == f"Deleted {NAME}."
    assert not values.exists()
    assert not list(values.parent.glob(f"{values.stem}.workers-*.json"))
    assert not os.path.exists(values)
