"""One declaration per request field (`spec.ClusterSpec`): the command line's options, the
REST check and the New-cluster dialog's description are all drawn from it."""

from __future__ import annotations

import pytest

from raylab.commands.parser import HelpShown, build_parser, request_from
from raylab.errors import SpecError
from raylab.profiles import Defaults, Profiles
from raylab.request_fields import Whole
from raylab.spec import FIELDS, REQUEST_FIELDS, ClusterSpec, describe_fields


def up_help() -> str:
    with pytest.raises(HelpShown) as shown:
        build_parser("%raycluster").parse_args(["up", "--help"])
    return " ".join(str(shown.value).split())  # argparse wraps lines


def test_each_flagged_field_is_an_option_of_up_with_its_help() -> None:
    text = up_help()
    flagged = {n: f for n, f in REQUEST_FIELDS.items() if f.flag is not None}
    assert "idle_timeout_minutes" not in flagged  # REST only
    for declared in flagged.values():
        assert declared.flag is not None
        assert declared.flag in text
        assert declared.help in text


def test_up_sends_what_its_options_were_given() -> None:
    args = build_parser("raylab").parse_args(
        ["up", "--gpus", "2", "--gpu-type", "a100", "--idle-suspend", "30m", "--no-wait"]
    )
    assert request_from(args) == {"gpus": "2", "gpu_type": "a100", "idle_suspend_minutes": "30m"}


def test_an_unknown_field_is_refused_with_every_declared_one() -> None:
    with pytest.raises(SpecError) as err:
        ClusterSpec.from_mapping({"comments": "x"}, Profiles())
    assert err.value.reason == f"unknown field 'comments'; allowed: {', '.join(FIELDS)}"


@pytest.mark.parametrize("name", [n for n, f in REQUEST_FIELDS.items() if isinstance(f, Whole)])
def test_whole_fields_are_checked_against_their_declared_bounds(name: str) -> None:
    declared = REQUEST_FIELDS[name]
    assert isinstance(declared, Whole)
    with pytest.raises(SpecError) as err:
        ClusterSpec.from_mapping({name: declared.high + 1}, Profiles())
    assert (err.value.field, err.value.reason) == (
        name,
        f"{declared.high + 1} is out of range; use {declared.low} to {declared.high}",
    )


def test_a_text_field_left_out_gets_the_default_and_sent_as_null_none() -> None:
    profiles = Profiles(defaults=Defaults(image="registry.example/ray:2"))
    assert ClusterSpec.from_mapping({}, profiles).image == "registry.example/ray:2"
    assert ClusterSpec.from_mapping({"image": None}, profiles).image is None


def test_the_dialog_description_lists_every_field_in_order() -> None:
    described = describe_fields()
    assert [d["name"] for d in described] == list(FIELDS)
    by_name = {d["name"]: d for d in described}
    assert by_name["workers"] == {
        "name": "workers",
        "kind": "whole",
        "label": "Workers",
        "help": "worker nodes (default from the profile)",
        "hint": "Besides the head",
        "placeholder": None,
        "dialog": True,
        "min": 0,
        "max": 512,
    }
    hidden = {d["name"] for d in described if not d["dialog"]}
    assert hidden == {"idle_timeout_minutes", "idle_suspend_minutes"}
