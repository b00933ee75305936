"""Parsing what the user types: `--env KEY=VALUE` and `pip install` arguments."""

from __future__ import annotations

import pytest

from raylab.errors import SpecError
from raylab.sync.packages import requirement_name
from raylab.sync.pip import PipFailed, parse_install, pip_lines
from raylab.sync.values import parse_env


def test_parse_env() -> None:
    assert parse_env(["A=1", "B==x", "C="], {}) == {"A": "1", "B": "=x", "C": ""}
    assert parse_env(["HOME_DIR"], {"HOME_DIR": "/h"}) == {"HOME_DIR": "/h"}
    refused = [
        ("=x", "not a variable name"),
        ("A-B=1", "not a variable name"),
        ("UNSET", "has no value"),
        ("PYTHONPATH=/x", "set by raylab and Ray"),
    ]
    for bad, why in refused:
        with pytest.raises(SpecError, match=why):
            parse_env([bad], {})


def test_pip_install_arguments() -> None:
    parsed = parse_install(["-U", "torch==2.5", "--index-url", "http://i", "./dist/x.whl",
                            "-e", "../mylib", "numpy"])  # fmt: skip
    assert parsed.index == ("torch==2.5", "numpy")
    assert parsed.local == ("./dist/x.whl", "../mylib")
    with pytest.raises(PipFailed, match="at least one package"):
        parse_install(["-U"])
    assert pip_lines("x = 1\n%pip install -q a b  # why\n!pip install c\n") == [
        ["-q", "a", "b"],
        ["c"],
    ]
    assert requirement_name("My_Lib[extra]>=1") == "my-lib"
    assert requirement_name("./x.whl") is None
