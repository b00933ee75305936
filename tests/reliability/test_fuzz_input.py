"""Property-based bad input (hypothesis): never a crash, never a traceback, nothing made.

Every generated request is refused somewhere — by validation, or by a zero-cluster quota
for the rare valid one — so these tests start no Ray process and create no state, and
the checks are: the refusal is one of raylab's own errors with a message, and the
backend's state folder stays empty.
"""

from __future__ import annotations

import json
import re
import string
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raylab.backends.kuberay.manifest import raycluster_manifest
from raylab.commands import CommandError, Commands, HelpShown
from raylab.config import Settings
from raylab.errors import RaylabError, SpecError
from raylab.profiles import Profiles
from raylab.spec import FIELDS, ClusterSpec
from tests.local.test_magics import NotebookOutput

NOTHING_ALLOWED = Settings.from_config(max_clusters_per_user=0, max_gpus_per_user=0)

nasty_text = st.one_of(
    st.text(max_size=80),
    st.sampled_from(
        [
            "",
            "-1",
            "0",
            "1e9",
            "9" * 40,
            "64GB",
            "64Gi; rm -rf /",
            "$(reboot)",
            "`id`",
            "../../etc/passwd",
            "a\nb",
            "é",
            "a" * 300,
            "NaN",
            "Infinity",
            "null",
            "ray:latest\x00",
            "registry:5000/../x",
        ]
    ),
)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | nasty_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=10), children, max_size=3)
    ),
    max_leaves=6,
)
bodies = st.one_of(
    st.dictionaries(st.sampled_from([*FIELDS, "gpu", "extra", ""]), json_values, max_size=6),
    json_values,
)


def assert_nothing_created(state_dir: Path) -> None:
    assert not list(state_dir.glob("*/cluster.json")), "a refused request created a cluster"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies)
def test_spec_refuses_with_a_field_or_accepts_safely(body: Any) -> None:
    try:
        spec = ClusterSpec.from_mapping(body, Profiles())
    except SpecError as err:
        assert err.field
        assert err.reason
        return
    # Whatever was accepted is safe to put in a manifest.
    manifest = raycluster_manifest(
        spec,
        Profiles().gpu_types[spec.gpu_type],
        owner="Fuzz User <x@y>",
        namespace="ns",
        image=spec.image or "rayproject/ray:2.60.0-py311",
        ray_version="2.60.0",
    )
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", manifest["metadata"]["name"])
    for key, value in manifest["metadata"]["labels"].items():
        assert re.fullmatch(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?", value), (key, value)
        assert len(value) <= 63
    text = json.dumps(manifest)
    assert "\x00" not in text
    assert "$(" not in text


magic_words = st.sampled_from(
    [
        "up", "down", "list", "status", "connect", "scale", "logs", "dashboard", "suspend",
        "resume", "--gpus", "--workers", "--memory", "--cpus", "--name", "--gpu-type",
        "--image", "--min-workers", "--max-workers", "--timeout", "--backend", "--tail",
        "--all", "--no-connect", "-1", "3", "0", "a100", "v100", "ray-x", "Bad_Name",
        "'", '"', "\\", ";", "&&", "|", "$HOME", "--", "-", "=",
        "--working-dir", "--no-sync", "--pip", "--requirements", "--env", "--exclude", "pip",
        "install", "KEY=1", "1=x", "x.whl", "missing.txt",
    ]
)  # fmt: skip
lines = st.one_of(
    st.lists(
        st.one_of(magic_words, st.text(alphabet=string.printable, max_size=12)), max_size=8
    ).map(" ".join),
    st.text(max_size=60),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(line=lines)
def test_magic_lines_never_crash(line: str) -> None:
    commands = Commands(
        NotebookOutput(), prog="%raycluster", may_connect=False, settings=NOTHING_ALLOWED,
        user="fuzz",
    )  # fmt: skip
    try:
        commands.run_line(line)
    except (CommandError, HelpShown) as err:
        assert str(err).strip()
        assert "Traceback" not in str(err)
    except RaylabError as err:
        assert err.message
    assert_nothing_created(NOTHING_ALLOWED.local_state_dir())
