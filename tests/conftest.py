"""Session-wide isolation: a private state folder and Jupyter dirs, and an orphan check.

Every Ray process a test starts inherits RAYLAB_STATE_DIR; at the end of the session
none may be left (that is how "no orphan processes after the test suite" is checked).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from raylab.backends.local.backend import CLUSTER_ENV, STATE_FILE, LocalBackend

_session_root: Path | None = None

# Ray 2.60's bare `ray.init()` (the export tests' notebooks run one) writes a token into
# the user's home, where it stays and turns token auth on for any later `ray start --head`
# that states no mode: what the suite wrote there it takes away again.
_HOME_TOKEN = Path.home() / ".ray" / "auth_token"
_HOME_TOKEN_KEY = pytest.StashKey[bool]()


@pytest.hookimpl(trylast=True)  # after pytest's tmpdir plugin has made its factory
def pytest_configure(config: pytest.Config) -> None:
    global _session_root
    # pytest's own factory (set up for plugins at configure time), not a second one: with
    # --basetemp, each factory empties that folder on first use, and a second one would
    # wipe this session's state folder under a running test.
    factory: pytest.TempPathFactory = config._tmp_path_factory  # type: ignore[attr-defined]
    _session_root = factory.mktemp("raylab-session", numbered=True)
    os.environ["RAYLAB_STATE_DIR"] = str(_session_root / "state")
    os.environ["JUPYTER_CONFIG_DIR"] = str(_session_root / "jupyter-config")
    os.environ["JUPYTER_DATA_DIR"] = str(_session_root / "jupyter-data")
    os.environ["JUPYTER_RUNTIME_DIR"] = str(_session_root / "jupyter-runtime")
    os.environ["IPYTHONDIR"] = str(_session_root / "ipython")
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    os.environ.pop("JUPYTERHUB_USER", None)
    config.stash[_HOME_TOKEN_KEY] = _HOME_TOKEN.exists()


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_HOME_TOKEN_KEY, True):
        return
    _HOME_TOKEN.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        _HOME_TOKEN.parent.rmdir()  # only if empty


def processes_of_this_session() -> list[psutil.Process]:
    """Live processes of local clusters started under this test session's state folder."""
    marker = os.environ["RAYLAB_STATE_DIR"]
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            env = proc.environ()
            ours = env.get("RAYLAB_STATE_DIR") == marker and CLUSTER_ENV in env
            if ours and proc.status() != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _local_clusters() -> set[str]:
    folder = Path(os.environ["RAYLAB_STATE_DIR"])
    if not folder.is_dir():
        return set()
    return {p.name for p in folder.iterdir() if (p / STATE_FILE).is_file()}


def _remove(clusters: set[str]) -> None:
    backend = LocalBackend(Path(os.environ["RAYLAB_STATE_DIR"]))
    for name in clusters:
        with contextlib.suppress(Exception):
            backend.delete(name)


def _kill_orphans() -> list[int]:
    left = processes_of_this_session()
    for proc in left:
        with contextlib.suppress(psutil.Error):
            proc.kill()
    return [p.pid for p in left]


# One test's leftovers never fail the tests after it: whatever a test (or its function
# fixtures) made and left, and whatever a module left when its fixtures are done, is
# removed at once, and that test or module errors, named, so the leak gets fixed.


@pytest.fixture(autouse=True)
def _test_leaves_no_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    before = _local_clusters()  # module fixtures' clusters are made before this runs
    yield
    left = _local_clusters() - before
    _remove(left)
    assert not left, f"{request.node.nodeid} left local clusters behind: {sorted(left)}"


@pytest.fixture(scope="module", autouse=True)
def _module_leaves_nothing(request: pytest.FixtureRequest) -> Iterator[None]:
    yield  # torn down after the module's own fixtures
    left = _local_clusters()
    _remove(left)
    orphans = _kill_orphans()
    where = request.node.nodeid
    assert not left, f"{where} left local clusters behind (removed): {sorted(left)}"
    assert not orphans, f"{where} left Ray processes behind (killed): {orphans}"


@pytest.fixture(scope="session", autouse=True)
def _no_orphans_at_the_end() -> Iterator[None]:
    yield
    left = _kill_orphans()
    assert not left, f"processes left behind by the test suite: {left}"


@pytest.fixture
def state_dir() -> Path:
    return Path(os.environ["RAYLAB_STATE_DIR"])


@pytest.fixture(scope="session")
def pipeline_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What every exported project depends on, installed once from the local wheelhouse
    (tests/export/support.py): the base of each project's fresh environment."""
    from tests.export.support import make_base

    return make_base(tmp_path_factory.mktemp("pipeline-base") / "venv")


# Time by folder at the end of every run, so the suite's budget (CI has 90 minutes on a
# cold machine) is visible where it is spent; docs/benchmarks.md keeps the cold figures.
# The slowest modules beside them: where sharing a fixture would win the most.
_seconds_by_folder: dict[str, float] = {}
_seconds_by_module: dict[str, float] = {}
SLOWEST_MODULES = 12


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    module = report.nodeid.split("::", 1)[0]
    parts = Path(module).parts
    folder = "/".join(parts[:2]) if len(parts) > 2 else parts[0]
    _seconds_by_folder[folder] = _seconds_by_folder.get(folder, 0.0) + report.duration
    _seconds_by_module[module] = _seconds_by_module.get(module, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _seconds_by_folder:
        return
    terminalreporter.section("time by folder (setup + call + teardown)")
    total = sum(_seconds_by_folder.values())
    for folder, seconds in sorted(_seconds_by_folder.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{folder:<24} {seconds:8.1f} s")
    terminalreporter.write_line(f"{'total':<24} {total:8.1f} s")
    terminalreporter.section(f"the {SLOWEST_MODULES} slowest modules")
    slowest = sorted(_seconds_by_module.items(), key=lambda kv: -kv[1])[:SLOWEST_MODULES]
    for module, seconds in slowest:
        terminalreporter.write_line(f"{module:<56} {seconds:8.1f} s")
