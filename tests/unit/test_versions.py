"""The kernel/cluster version check that runs before Ray Client connects."""

from __future__ import annotations

import contextlib
import http.server
import json
import threading
from collections.abc import Iterator

import pytest

from raylab.errors import VersionMismatch
from raylab.kernel.connect import connect
from raylab.model import ClusterInfo, Phase
from raylab.profiles import Profiles
from raylab.spec import ClusterSpec
from raylab.versions import check_versions, kernel_versions, running_versions


def info(ray_version: str, python_version: str) -> ClusterInfo:
    spec = ClusterSpec.from_mapping({"name": "exp"}, Profiles())
    return ClusterInfo(
        name="exp", owner="me", backend="local", phase=Phase.READY, spec=spec,
        ray_version=ray_version, python_version=python_version,
    )  # fmt: skip


def test_same_versions_pass() -> None:
    check_versions(info(*kernel_versions()))


def test_ray_mismatch_names_both_versions_and_the_fix() -> None:
    ray_here, py_here = kernel_versions()
    with pytest.raises(VersionMismatch) as err:
        check_versions(info("2.9.3", py_here))
    assert f"runs Ray 2.9.3 on Python {py_here}" in err.value.message
    assert f"this kernel has Ray {ray_here}" in err.value.message
    tag = py_here.replace(".", "")
    assert f"--image rayproject/ray:{ray_here}-py{tag}" in (err.value.detail or "")
    assert "pip install 'ray[client]==2.9.3'" in (err.value.detail or "")


def test_python_mismatch() -> None:
    ray_here, _ = kernel_versions()
    with pytest.raises(VersionMismatch, match=r"on Python 3\.9"):
        check_versions(info(ray_here, "3.9"))


@contextlib.contextmanager
def fake_head_dashboard(ray_version: str, python_version: str) -> Iterator[str]:
    """A stand-in for the dashboard of a head that runs other versions (only this
    machine's Ray can run here): it answers the one route raylab reads, as Ray does."""
    body = json.dumps(
        {"result": True, "msg": "", "data": {"rayVersion": ray_version,
                                               "pythonVersion": python_version}}
    ).encode()  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            found = self.path == "/api/v0/cluster_metadata"
            self.send_response(200 if found else 404)
            self.end_headers()
            self.wfile.write(body if found else b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_the_running_heads_versions_are_what_counts() -> None:
    here = kernel_versions()
    with fake_head_dashboard("2.9.3", "3.9.18") as dashboard:
        assert running_versions(dashboard) == ("2.9.3", "3.9")
        # raylab's record says the kernel's versions; the head says otherwise: refused
        # before Ray Client is tried (its address here leads nowhere).
        with pytest.raises(VersionMismatch, match=r"runs Ray 2\.9\.3 on Python 3\.9"):
            connect(info(*here), address="ray://127.0.0.1:9", dashboard=dashboard)
    # The other way round: a record that looks wrong (an image tag) but a head that
    # runs the kernel's versions passes.
    check_versions(info("2.9.3", "3.9"), running=here)


def test_no_dashboard_falls_back_to_the_record() -> None:
    assert running_versions(None) is None
    assert running_versions("http://127.0.0.1:9") is None  # nothing listens there
    with pytest.raises(VersionMismatch):
        check_versions(info("2.9.3", kernel_versions()[1]), running=None)
