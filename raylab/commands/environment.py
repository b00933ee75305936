"""The environment options of `up` and `connect`, and the steps the verbs take with them.

`ClusterEnvironments` is the plain class the verbs call: prepare (every check, nothing
changed yet), remember (the cluster's environment, the owner's values), forget (`down`).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import Settings
from ..model import ClusterInfo
from ..service import ClusterService
from ..sync.options import EnvOptions
from ..sync.values import EnvValues

if TYPE_CHECKING:  # runtime_env (pathspec, importlib.metadata) loads on the first connect
    from ..sync.runtime_env import Prepared


def add_environment_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "environment (what the workers get; options given replace those parts of what "
        "the cluster remembers)"
    )
    group.add_argument(
        "--working-dir", dest="working_dir", metavar="PATH",
        help="folder shipped as Ray's working_dir (default: this notebook's folder)",
    )  # fmt: skip
    group.add_argument(
        "--no-sync", dest="no_sync", action="store_true", help="ship no working directory"
    )
    group.add_argument(
        "--exclude", dest="excludes", action="append", metavar="PATTERN",
        help="leave these out of the working directory too (gitignore syntax; repeatable)",
    )  # fmt: skip
    group.add_argument(
        "--pip", nargs="+", action="extend", metavar="PKG",
        help="packages the workers install (requirements such as torch==2.5, or local .whl files)",
    )  # fmt: skip
    group.add_argument("--requirements", metavar="FILE", help="a requirements file for the workers")
    group.add_argument(
        "--env", action="append", metavar="KEY=VALUE",
        help="environment variable for the workers (KEY alone: this kernel's value; repeatable)",
    )  # fmt: skip


def options_from(args: argparse.Namespace) -> EnvOptions:
    def tuple_or_none(value: list[str] | None) -> tuple[str, ...] | None:
        return tuple(value) if value is not None else None

    return EnvOptions(
        working_dir=args.working_dir,
        no_sync=bool(args.no_sync),
        excludes=tuple_or_none(args.excludes),
        pip=tuple_or_none(args.pip),
        requirements=args.requirements,
        env=tuple_or_none(args.env),
    )


class ClusterEnvironments:
    def __init__(
        self, settings: Settings, values: EnvValues | None = None, cwd: Path | None = None
    ) -> None:
        self.settings = settings
        self.values = values or EnvValues.default()
        self.cwd = cwd or Path(os.getcwd())

    @property
    def max_bytes(self) -> int:
        return int(self.settings.options.working_dir_max_mib) * 2**20

    def prepare(self, options: EnvOptions, info: ClusterInfo | None) -> Prepared:
        """Check and resolve; `info` None for a cluster that does not exist yet."""
        from ..sync.runtime_env import prepare

        return prepare(
            options,
            info.environment if info else None,
            cwd=self.cwd,
            max_bytes=self.max_bytes,
            stored_values=self.values.load(info) if info else None,
        )

    def remember(
        self, service: ClusterService, info: ClusterInfo, prepared: Prepared
    ) -> ClusterInfo:
        info = service.set_environment(info.name, prepared.environment)
        if prepared.values_changed:
            self.values.save(info, prepared.values)
        return info

    def forget(self, info: ClusterInfo) -> None:
        self.values.delete(info)
