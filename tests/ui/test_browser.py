"""The JupyterLab sidebar in a real browser: Galata/Playwright specs in tests/ui/*.spec.ts.

This wrapper starts a real `jupyter lab` (raylab installed from the wheel, local backend,
the session's RAYLAB_STATE_DIR), runs `npx playwright test` against it with Debian's
Chromium, and stops the server. What the specs do with Ray clusters is checked again
here: none may be left, and no Ray process either.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from raylab.backends.local.backend import LocalBackend
from raylab.config import Settings
from raylab.identity import current_user
from tests.conftest import processes_of_this_session
from tests.fake_gpu import FakeGpus
from tests.ui.lab_server import CHROMIUM, REPO, playwright_env, running_lab

pytestmark = pytest.mark.ui

PLAYWRIGHT_TIMEOUT_S = 840


def _leftover_clusters() -> list[str]:
    settings = Settings.from_config()
    return [c.name for c in LocalBackend(settings.local_state_dir()).clusters()]


def _delete_all() -> None:
    backend = LocalBackend(Settings.from_config().local_state_dir())
    for info in backend.clusters():
        backend.delete(info.name)


def test_sidebar_in_chromium(tmp_path: Path) -> None:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make sysdeps` (apt-get install chromium)")
    npx = shutil.which("npx")
    if npx is None or not (REPO / "node_modules" / "@jupyterlab" / "galata").is_dir():
        pytest.fail("node_modules is not installed: `npm ci` (make does it)")
    assert not _leftover_clusters(), "clusters exist before the browser tests"

    # FAKE GPUs (this machine has none): every cluster's worker-1 reports two through a
    # fake NVML, one busy and one not, and the server's culler reads them every 2 s, for
    # the card's GPU use row and the overview's counts (sidebar.spec.ts).
    gpus = FakeGpus(tmp_path / "fake-gpu")
    gpus.set("worker-1", [(87, 61000, 81920), (2, 1000, 81920)])
    try:
        config = (
            f"c.Raylab.max_gpus_per_user = 2\nc.Raylab.admin_users = [{current_user()!r}]\n"
            "c.Raylab.cull_interval_seconds = 2\n"
        )
        with running_lab(extra_config=config, extra_env=gpus.env()) as lab:
            try:
                # RAYLAB_UI_GREP runs only the specs whose title matches (development).
                grep = os.environ.get("RAYLAB_UI_GREP")
                result = subprocess.run(
                    [npx, "playwright", "test", "--config", "tests/ui/playwright.config.ts"]
                    + (["--grep", grep] if grep else []),
                    cwd=REPO,
                    env=playwright_env(lab),
                    capture_output=True,
                    text=True,
                    timeout=PLAYWRIGHT_TIMEOUT_S,
                )
                output = result.stdout + result.stderr
                code = result.returncode
            except subprocess.TimeoutExpired as exc:
                output = f"{exc.stdout or ''}{exc.stderr or ''}"
                code = -1
            print(output)
            assert code == 0, (
                f"playwright exited with {code}:\n{output[-6000:]}\n"
                f"--- jupyter lab log ---\n{lab.log_tail()}"
            )
        left = _leftover_clusters()
        assert not left, f"the browser tests left clusters behind: {left}"
        deadline = time.monotonic() + 30
        while processes_of_this_session() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not processes_of_this_session(), "Ray processes left after deleting"
    finally:
        _delete_all()  # whatever a failed spec left running
        os.environ.pop("RAYLAB_UI_URL", None)
