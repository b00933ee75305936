"""From `up`/`connect` options and what the cluster remembers to Ray's `runtime_env`.

`prepare` does every check first (the folder exists and fits the cap, the requirements
file reads, each --env parses), so that bad input is refused before anything is created
or connected, and returns the environment to remember, the env-var values to keep, and
the `runtime_env` for `ray.init`.

Options given replace those parts of the environment; parts not mentioned stay as the
cluster remembers them. A cluster that remembers nothing (made by the sidebar, or before
raylab remembered environments) gets the default: the kernel's folder, synced.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SpecError
from ..model import ClusterEnvironment, format_size
from . import workdir
from .options import EnvOptions
from .packages import (
    check_wheel,
    default_cache,
    local_packages,
    requirement_name,
    unpacked_wheel,
    wheel_name,
)
from .values import parse_env


@dataclass(frozen=True)
class Prepared:
    environment: ClusterEnvironment
    values: dict[str, str]  # env-var values (never shown; see values.py)
    values_changed: bool  # --env was given: store these values
    runtime_env: dict[str, Any]
    fingerprint: str  # changes when anything shipped changes, so a reconnect re-ships
    warnings: list[str] = field(default_factory=list)


def prepare(
    options: EnvOptions,
    remembered: ClusterEnvironment | None,
    *,
    cwd: Path,
    max_bytes: int,
    stored_values: dict[str, str] | None = None,
) -> Prepared:
    if options.working_dir is not None and options.no_sync:
        raise SpecError("working_dir", "--working-dir and --no-sync contradict; give one")
    base = remembered or ClusterEnvironment(working_dir=str(cwd))
    warnings: list[str] = []
    folder = _working_dir(options, base, cwd, max_bytes, warnings)
    packages = _packages(options, base, cwd, max_bytes, warnings)
    names, values = _env_vars(options, base, stored_values or {}, warnings)
    scan = folder.scan
    environment = ClusterEnvironment(
        working_dir=folder.remembered,
        working_dir_bytes=scan.total_bytes if scan else base.working_dir_bytes,
        working_dir_files=len(scan.files) if scan else base.working_dir_files,
        excludes=folder.excludes,
        pip=packages.pip,
        wheels=packages.wheels,
        local_packages=packages.local,
        env_names=names,
    )
    if environment.working_dir is None:
        environment = environment.with_changes(working_dir_bytes=0, working_dir_files=0)
    runtime_env: dict[str, Any] = {}
    if scan is not None:
        runtime_env["working_dir"] = str(scan.root)
        runtime_env["excludes"] = scan.ray_excludes()
    if packages.py_modules:
        runtime_env["py_modules"] = list(packages.py_modules)
        runtime_env.setdefault("excludes", list(workdir.ALWAYS_EXCLUDED))
    if packages.pip:
        runtime_env["pip"] = list(packages.pip)
    if values:
        runtime_env["env_vars"] = dict(values)
    return Prepared(
        environment=environment,
        values=values,
        values_changed=options.env is not None,
        runtime_env=runtime_env,
        fingerprint=_fingerprint(runtime_env, scan, list(packages.py_modules)),
        warnings=warnings,
    )


@dataclass(frozen=True)
class _Folder:
    scan: workdir.WorkdirScan | None  # what ships (None: nothing)
    remembered: str | None  # the cluster's folder (kept when it is on another machine)
    excludes: tuple[str, ...]


def _working_dir(
    options: EnvOptions, base: ClusterEnvironment, cwd: Path, max_bytes: int, warnings: list[str]
) -> _Folder:
    excludes = (
        workdir.check_patterns(options.excludes) if options.excludes is not None else base.excludes
    )
    if options.no_sync:
        return _Folder(None, None, excludes)
    if options.working_dir is not None:
        folder = workdir.check_folder(options.working_dir, cwd)
    elif base.working_dir is not None:
        folder = Path(base.working_dir)
        if not folder.is_dir():
            warnings.append(
                f"the cluster's working directory {folder} is not on this machine; connected "
                "without it (--working-dir PATH ships another)"
            )
            # A kernel elsewhere never makes the cluster forget its owner's folder.
            return _Folder(None, base.working_dir, excludes)
    else:
        return _Folder(None, None, excludes)
    scan = workdir.scan(folder, excludes)
    workdir.check_size(scan, max_bytes)
    return _Folder(scan, str(folder), excludes)


@dataclass(frozen=True)
class _Packages:
    pip: tuple[str, ...]
    wheels: tuple[str, ...]
    local: tuple[str, ...]  # local packages to remember
    py_modules: tuple[str, ...]  # what ships


def _packages(
    options: EnvOptions, base: ClusterEnvironment, cwd: Path, max_bytes: int, warnings: list[str]
) -> _Packages:
    if options.pip is not None or options.requirements is not None:
        requested = [*(options.pip or ()), *_requirements(options.requirements, cwd)]
        pip, wheels = _split(requested, cwd)
    else:
        pip, wheels = list(base.pip), list(base.wheels)
    # A package named with --pip is that one, not the kernel's copy.
    explicit = {n for n in map(requirement_name, pip) if n} | set(map(wheel_name, wheels))
    by_name = {p.name: p for p in local_packages(skip=explicit)}
    wanted = sorted((set(base.local_packages) - explicit) | set(by_name))
    missing = [n for n in wanted if n not in by_name]
    if missing:
        warnings.append(
            f"not installed in this kernel, so not shipped: {', '.join(missing)} (the kernel "
            "that made the cluster had them)"
        )
    shipped = []
    for p in (by_name[n] for n in wanted if n in by_name):
        if p.size > max_bytes:
            warnings.append(
                f"{p.name} {p.version} (installed from local files) is over the "
                f"{format_size(max_bytes)} limit and was not shipped; install it on the "
                "cluster's image or from an index with --pip"
            )
        else:
            shipped.append(p)
    py_modules = [path for p in shipped for path in p.paths]
    for wheel in wheels:
        if Path(wheel).is_file():
            py_modules.extend(unpacked_wheel(wheel, default_cache()))
        else:
            warnings.append(f"wheel {wheel} is not on this machine; not shipped")
    # Names this kernel lacks stay remembered: the owner's kernel has them.
    local = tuple(sorted({p.name for p in shipped} | set(missing)))
    return _Packages(tuple(pip), tuple(wheels), local, tuple(py_modules))


def _env_vars(
    options: EnvOptions, base: ClusterEnvironment, stored: dict[str, str], warnings: list[str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    if options.env is not None:
        values = parse_env(list(options.env))
        return tuple(values), values
    names = base.env_names
    lost = [k for k in names if k not in stored]
    if lost:
        warnings.append(
            f"no value on this machine for {', '.join(lost)}: connect with "
            f"--env {lost[0]}=VALUE to set them again"
        )
    return names, {k: stored[k] for k in names if k in stored}


def _requirements(path: str | None, cwd: Path) -> list[str]:
    """The requirement lines of a requirements file (comments and blanks left out)."""
    if path is None:
        return []
    if "\0" in path:
        raise SpecError("requirements", f"{path!r} is not a path")
    file = Path(cwd, Path(path).expanduser())
    try:
        text = file.read_text()
    except FileNotFoundError:
        raise SpecError("requirements", f"{path!r} does not exist") from None
    except IsADirectoryError:
        raise SpecError("requirements", f"{path!r} is a folder, not a requirements file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError("requirements", f"cannot read {path!r}: {exc}") from None
    lines = []
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            raise SpecError(
                "requirements",
                f"{path!r}: {line!r} is a pip option; list only requirements "
                "(one per line, such as numpy>=2)",
            )
        lines.append(line)
    return lines


def _split(requested: Sequence[str], cwd: Path) -> tuple[list[str], list[str]]:
    """Index requirements (for Ray's pip) and local wheel files (shipped as files)."""
    pip: list[str] = []
    wheels: list[str] = []
    for r in requested:
        r = r.strip()
        if not r:
            continue
        if r.endswith(".whl") or r.startswith((".", "/", "~")):
            if not r.endswith(".whl"):
                raise SpecError(
                    "pip",
                    f"{r!r} is a local folder; install it in the kernel with "
                    "`pip install -e` and it is shipped by itself",
                )
            wheels.append(check_wheel(r, cwd))
        elif r.startswith("-"):
            raise SpecError("pip", f"{r!r} is a pip option; give package requirements only")
        else:
            pip.append(r)
    return pip, wheels


def _fingerprint(
    runtime_env: dict[str, Any], scan: workdir.WorkdirScan | None, modules: list[str]
) -> str:
    digest = hashlib.sha256(json.dumps(runtime_env, sort_keys=True).encode())
    if scan is not None:
        digest.update(scan.stamp.encode())
    for module in modules:
        digest.update(_tree_stamp(Path(module)).encode())
    return digest.hexdigest()


def _tree_stamp(path: Path) -> str:
    """Cheap change detection for a shipped package folder: its files' sizes and times."""
    if path.is_file():
        st = path.stat()
        return f"{path}:{st.st_size}:{st.st_mtime_ns}"
    parts = []
    for root, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            st = os.stat(os.path.join(root, name))
            parts.append(f"{name}:{st.st_size}:{st.st_mtime_ns}")
    return f"{path}:" + ",".join(sorted(parts))
