"""The `export` verb: its arguments, which notebook and which cluster it uses."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from raylab.config import Settings
from raylab.errors import NotFound, RaylabError
from raylab.export.verb import add_export_arguments, run_export, this_notebook
from raylab.model import ClusterInfo, Phase
from raylab.spec import ClusterSpec

from .support import Lines, make_notebook

SETTINGS = Settings.from_config()


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="%raycluster export")
    add_export_arguments(parser)
    return parser.parse_args(argv)


def info(name: str, gpus: int) -> ClusterInfo:
    spec = ClusterSpec.from_mapping({"name": name, "gpus": gpus, "workers": 1}, SETTINGS.profiles)
    return ClusterInfo(name=name, owner="me", backend="local", phase=Phase.READY, spec=spec)


def test_arguments() -> None:
    args = parse("nb.ipynb", "--name", "daily", "--cluster", "big", "--schedule", "0 4 * * 1",
                 "--cells", "tagged", "--out", "pipes", "--force")  # fmt: skip
    assert vars(args) == {"notebook": "nb.ipynb", "name": "daily", "cluster": "big",
                          "schedule": "0 4 * * 1", "cells": "tagged", "out": "pipes",
                          "force": True}  # fmt: skip
    assert parse().notebook is None


def test_connected_cluster_is_the_default(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "train.ipynb", ["x = 1\nx"])
    out = Lines()
    result = run_export(parse(str(nb)), connected_cluster_info=info("mine", 2), out=out,
                        settings=SETTINGS)  # fmt: skip
    assert "cluster 'mine', which this kernel is connected to" in result.report
    assert (result.out_dir / "train/cluster.py").read_text().count("GPUS = 2") == 1
    assert out.warnings == []
    assert out.lines == [
        f"Exported train.ipynb to {tmp_path / 'train_pipeline'}: the train pipeline "
        f"({len(result.files)} files; EXPORT.md says what went in). "
        f"Next: cd {tmp_path / 'train_pipeline'} && pip install -e '.[test]' && pytest"
    ]


def test_cluster_option_wins_and_is_looked_up(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "train.ipynb", ["x = 1"])
    asked: list[str] = []

    def lookup(name: str) -> ClusterInfo:
        asked.append(name)
        if name != "big":
            raise NotFound(f"no cluster named {name!r}")
        return info("big", 4)

    args = parse(str(nb), "--cluster", "big")
    result = run_export(args, connected_cluster_info=info("mine", 2), out=Lines(),
                        settings=SETTINGS, lookup=lookup)  # fmt: skip
    assert asked == ["big"]
    assert "GPUS = 4" in (result.out_dir / "train/cluster.py").read_text()
    with pytest.raises(NotFound):
        run_export(parse(str(nb), "--cluster", "nope", "--force"), connected_cluster_info=None,
                   out=Lines(), settings=SETTINGS, lookup=lookup)  # fmt: skip


def test_without_a_cluster_it_says_so(tmp_path: Path) -> None:
    nb = make_notebook(tmp_path / "train.ipynb", ["import ray", "f = ray.remote(num_gpus=1)(len)"])
    out = Lines()
    result = run_export(parse(str(nb)), connected_cluster_info=None, out=out, settings=SETTINGS)
    assert out.warnings == [
        "cells 2 ask Ray for GPUs but the pipeline's cluster has none; export with --cluster "
        "NAME of a GPU cluster",
        "no cluster connected: the pipeline uses the default cluster spec; pass --cluster "
        "NAME to use one of yours",
    ]
    assert "**Cells 2 ask Ray for GPUs, but this cluster has none**" in result.report


def test_the_kernels_notebook_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    nb = make_notebook(tmp_path / "session.ipynb", ["x = 1"])
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert this_notebook({}) is None
    with pytest.raises(RaylabError, match="which notebook"):
        run_export(parse(), connected_cluster_info=None, out=Lines(), settings=SETTINGS)
    assert this_notebook({"__session__": str(nb)}) == str(nb)
    monkeypatch.setenv("JPY_SESSION_NAME", str(nb))  # what jupyter_server gives a kernel
    result = run_export(parse(), connected_cluster_info=None, out=Lines(), settings=SETTINGS)
    assert result.out_dir == tmp_path / "session_pipeline"


def test_wired_into_the_verbs(tmp_path: Path) -> None:
    from raylab import commands
    from raylab.commands.parser import VERBS

    assert "export" in VERBS
    nb = make_notebook(tmp_path / "cli.ipynb", ["x = 1\nx"])
    out = Lines()
    runner = commands.Commands(out, prog="raylab", may_connect=False, settings=SETTINGS)  # type: ignore[arg-type]
    runner.run(["export", str(nb), "--schedule", "@hourly"])
    assert (tmp_path / "cli_pipeline" / "EXPORT.md").exists()
    with pytest.raises(commands.CommandError, match="--schedule"):
        runner.run(["export", str(nb), "--schedule", "soon", "--force"])
