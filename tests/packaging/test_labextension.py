"""Packaging checks for the prebuilt JupyterLab extension.

These tests assume the project was built and installed the way the Makefile does it:

    npm ci && npm run build:prod
    pip wheel --no-deps --no-build-isolation -w dist .
    pip install --no-deps --force-reinstall dist/raylab-<version>-py3-none-any.whl

into the environment of the interpreter running pytest. They check the wheel itself, what
`jupyter labextension list` and `jupyter server extension list` report for the installed
package, and that JupyterLab starts in a real Chromium (`python -m jupyterlab.browser_check`)
with the raylab plugin activated.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "dist"
NPM_NAME = "raylab"
LABEXT_PREFIX = f"share/jupyter/labextensions/{NPM_NAME}"
SERVER_CONFIG = "etc/jupyter/jupyter_server_config.d/raylab.json"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

# Debian's chromium (apt-get install chromium); never a downloaded browser.
CHROMIUM = os.environ.get("RAYLAB_CHROMIUM", "/usr/bin/chromium")
BROWSER_CHECK_TIMEOUT_S = 300


def _project_version() -> str:
    with (ROOT / "pyproject.toml").open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


VERSION = _project_version()


def _run(args: list[str], env: dict[str, str], timeout: float = 120) -> str:
    """Run a command; return stdout and stderr together, without colour codes."""
    proc = subprocess.run(
        args,
        env=env,
        cwd=env.get("HOME"),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    out = ANSI.sub("", proc.stdout + proc.stderr)
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{out}"
    return out


@pytest.fixture(scope="module")
def wheel_path() -> Path:
    path = DIST / f"raylab-{VERSION}-py3-none-any.whl"
    if not path.is_file():
        pytest.fail(
            f"{path} not found: build it first "
            "(npm ci && npm run build:prod && pip wheel --no-deps --no-build-isolation -w dist .)"
        )
    return path


@pytest.fixture(scope="module")
def wheel_data(wheel_path: Path) -> dict[str, bytes]:
    """The wheel's shared-data files, keyed by their path below `<name>.data/data/`."""
    marker = f"raylab-{VERSION}.data/data/"
    with zipfile.ZipFile(wheel_path) as zf:
        return {
            name.removeprefix(marker): zf.read(name)
            for name in zf.namelist()
            if name.startswith(marker)
        }


@pytest.fixture
def jupyter_env(tmp_path: Path) -> dict[str, str]:
    """Environment with user-level Jupyter dirs in a temp folder.

    Only the installed environment (sys.prefix) is seen: nothing from the user's own
    ~/.jupyter or ~/.local/share/jupyter can make a check pass or fail.
    """
    env = dict(os.environ)
    home = tmp_path / "home"
    home.mkdir()
    env.update(
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter_config"),
        JUPYTER_DATA_DIR=str(tmp_path / "jupyter_data"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter_runtime"),
        IPYTHONDIR=str(tmp_path / "ipython"),
        NO_COLOR="1",
    )
    for var in ("JUPYTER_PATH", "JUPYTER_CONFIG_PATH", "JUPYTERLAB_DIR", "JUPYTER_PREFER_ENV_PATH"):
        env.pop(var, None)
    # Put this interpreter's scripts first, as an activated environment would.
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


# --- the wheel ------------------------------------------------------------------------------


def test_wheel_ships_the_prebuilt_labextension(wheel_data: dict[str, bytes]) -> None:
    package = json.loads(wheel_data[f"{LABEXT_PREFIX}/package.json"])
    assert package["name"] == NPM_NAME
    assert package["version"] == VERSION
    assert package["jupyterlab"]["extension"] is True

    load = package["jupyterlab"]["_build"]["load"]
    assert re.fullmatch(r"static/remoteEntry\.[0-9a-f]+\.js", load), load
    assert f"{LABEXT_PREFIX}/{load}" in wheel_data
    remote_entries = [
        name
        for name in wheel_data
        if re.fullmatch(rf"{LABEXT_PREFIX}/static/remoteEntry\.[0-9a-f]+\.js", name)
    ]
    # A stale bundle from an earlier build would be a second remoteEntry.
    assert remote_entries == [f"{LABEXT_PREFIX}/{load}"]


def test_wheel_ships_install_json(wheel_data: dict[str, bytes]) -> None:
    install = json.loads(wheel_data[f"{LABEXT_PREFIX}/install.json"])
    assert install["packageManager"] == "python"
    assert install["packageName"] == "raylab"
    assert "uninstallInstructions" in install


def test_wheel_enables_the_server_extension(wheel_data: dict[str, bytes]) -> None:
    config = json.loads(wheel_data[SERVER_CONFIG])
    assert config == {"ServerApp": {"jpserver_extensions": {"raylab": True}}}


def test_installed_files_come_from_this_wheel(wheel_data: dict[str, bytes]) -> None:
    """The environment holds this wheel's build, not a stale or editable install."""
    for name in (f"{LABEXT_PREFIX}/package.json", f"{LABEXT_PREFIX}/install.json", SERVER_CONFIG):
        installed = Path(sys.prefix) / name
        assert installed.is_file(), f"{installed} missing: install the wheel from dist/"
        assert installed.read_bytes() == wheel_data[name], f"{installed} differs from the wheel"


# --- what Jupyter reports -------------------------------------------------------------------


def test_labextension_list_shows_raylab_enabled(jupyter_env: dict[str, str]) -> None:
    out = _run([sys.executable, "-m", "jupyterlab.labextensions", "list"], jupyter_env)
    assert re.search(rf"^\s*raylab v{re.escape(VERSION)} enabled\s+OK\b", out, re.M), out


def test_server_extension_list_shows_raylab_enabled(jupyter_env: dict[str, str]) -> None:
    out = _run(
        [sys.executable, "-m", "jupyter_server.extension.serverextension", "list"], jupyter_env
    )
    assert re.search(r"^\s*raylab\s+enabled\b", out, re.M), out
    assert re.search(r"^\s*raylab\b.*\bOK\b", out, re.M), out
    assert not re.search(r"^\s*X\s+.*raylab", out, re.M), out


# --- JupyterLab in a real browser -----------------------------------------------------------

# jupyterlab.browser_check (4.6) runs `npm install playwright` and `npx playwright install
# chromium` in <app dir>/browser_test unless node_modules is already there, then runs
# `node browser-test.js URL`, which does `require('playwright').chromium.launch(...)`.
# The package below stands in for `playwright` there: it is the project's playwright-core
# (a devDependency, so `npm ci` brings it; it never downloads browsers) with
# `chromium.launch` pointed at Debian's chromium, and page console messages echoed so the
# test can see the raylab plugin activate. Its `playwright install` is a no-op.
PLAYWRIGHT_SHIM = r"""
const core = require(process.env.RAYLAB_PLAYWRIGHT_CORE);
const chromium = core.chromium;
const launch = chromium.launch.bind(chromium);
chromium.launch = async (options = {}) => {
  const browser = await launch({
    ...options,
    executablePath: process.env.RAYLAB_CHROMIUM
  });
  const newContext = browser.newContext.bind(browser);
  browser.newContext = async (...args) => {
    const context = await newContext(...args);
    context.on('console', msg =>
      console.log(`[browser console.${msg.type()}] ${msg.text()}`)
    );
    context.on('weberror', err =>
      console.log(`[browser pageerror] ${err.error()}`)
    );
    return context;
  };
  return browser;
};
module.exports = core;
"""

PLAYWRIGHT_CLI_SHIM = r"""#!/usr/bin/env node
if (process.argv[2] === 'install') {
  console.log(`playwright install skipped: using ${process.env.RAYLAB_CHROMIUM}`);
  process.exit(0);
}
console.error('only `playwright install` is provided by this stand-in');
process.exit(1);
"""


@pytest.fixture
def browser_app_dir(tmp_path: Path) -> Path:
    """A JupyterLab app dir: the installed core assets plus a browser_test stand-in."""
    from jupyterlab.commands import get_app_dir  # type: ignore[import-untyped]

    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} not found: apt-get install -y chromium")
    if shutil.which("node") is None or shutil.which("npx") is None:
        pytest.fail("node and npx are needed by jupyterlab.browser_check")
    core = ROOT / "node_modules" / "playwright-core"
    if not (core / "package.json").is_file():
        pytest.fail(f"{core} missing: run `npm ci` first")

    saved = os.environ.pop("JUPYTERLAB_DIR", None)
    try:
        installed_app_dir = Path(get_app_dir())
    finally:
        if saved is not None:
            os.environ["JUPYTERLAB_DIR"] = saved
    app_dir = tmp_path / "lab"
    app_dir.mkdir()
    for sub in ("static", "schemas", "themes"):
        if (installed_app_dir / sub).exists():
            (app_dir / sub).symlink_to(installed_app_dir / sub, target_is_directory=True)
    assert (app_dir / "static" / "index.html").is_file(), f"no JupyterLab in {installed_app_dir}"

    target = app_dir / "browser_test"
    shim = target / "node_modules" / "playwright"
    (shim / "bin").mkdir(parents=True)
    (target / "package.json").write_text(
        json.dumps({"name": "browser-test", "private": True, "dependencies": {"playwright": "*"}})
    )
    (shim / "package.json").write_text(
        json.dumps(
            {
                "name": "playwright",
                "version": "0.0.0-raylab",
                "main": "index.js",
                "bin": {"playwright": "bin/cli.js"},
            }
        )
    )
    (shim / "index.js").write_text(PLAYWRIGHT_SHIM)
    cli = shim / "bin" / "cli.js"
    cli.write_text(PLAYWRIGHT_CLI_SHIM)
    cli.chmod(0o755)
    (target / "node_modules" / ".bin").mkdir()
    (target / "node_modules" / ".bin" / "playwright").symlink_to("../playwright/bin/cli.js")
    return app_dir


def test_browser_check_activates_raylab(
    jupyter_env: dict[str, str], browser_app_dir: Path, tmp_path: Path
) -> None:
    env = dict(jupyter_env)
    env.update(
        JUPYTERLAB_DIR=str(browser_app_dir),
        RAYLAB_PLAYWRIGHT_CORE=str(ROOT / "node_modules" / "playwright-core"),
        RAYLAB_CHROMIUM=CHROMIUM,
        PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1",
        JLAB_BROWSER_TYPE="chromium",
        JLAB_BROWSER_CHECK_OUTPUT=str(tmp_path / "screenshots"),
    )
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    args = [
        sys.executable,
        "-m",
        "jupyterlab.browser_check",
        "--allow-root",  # containers and CI often run as root
        f"--ServerApp.root_dir={notebooks}",
        "--ServerApp.port=0",
    ]
    try:
        out = _run(args, env, timeout=BROWSER_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:  # pragma: no cover - diagnostic only
        pytest.fail(f"browser_check timed out after {BROWSER_CHECK_TIMEOUT_S}s:\n{exc.output!r}")

    assert "Browser test complete" in out, out
    # The plugin ran in the page and the server extension (installed from the same wheel)
    # answered it: it logs the profile count. It must never raise during activation.
    assert "could not load GPU profiles" not in out, out
    assert re.search(r"raylab: \d+ GPU profiles", out), out
    # browser_check itself fails on console.error calls and Python logged errors; Chromium's
    # own "Failed to load resource" console lines (a 404 without the server extension) are
    # not calls, so they are allowed. Uncaught page errors are not.
    assert "[browser pageerror]" not in out, out
