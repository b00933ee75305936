"""The notebook's folder as Ray's working_dir: which files go, how big they are.

Ray packs the folder itself (and skips the upload when the cluster already holds the
same content). This module decides the file list first, with Ray's own rules, so that
the size cap, the card's "working dir 3.2 MiB" and what the cluster receives are the
same set: `.gitignore` and `.rayignore` in the folder and each sub-folder (each file's
patterns relative to its folder, any match excludes, as Ray applies them), Ray's default
excludes, folders nobody wants on a cluster (virtual environments, node_modules,
checkpoints), and the user's `--exclude` patterns. The same patterns go to Ray as
`excludes`, so both walks agree.

A symlink that leads outside the folder is left out and listed (`outside`), never
followed: Ray's walk would follow it and ship whatever it points to (`~/.ssh/id_rsa`,
another user's file the link's owner may read) to the cluster or into an exported
project. Ray gets it as an exclude too. A symlink to something inside the folder ships
as before.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pathspec import PathSpec

from ..errors import RaylabError, SpecError
from ..model import format_size

# Ray's own default excludes (RAY_RUNTIME_ENV_DEFAULT_EXCLUDES) plus what is never code or
# data a task reads: tool caches, Jupyter's checkpoints, JavaScript dependencies.
ALWAYS_EXCLUDED = (
    ".git",
    ".venv",
    "venv",
    "__pycache__",
    ".hg",
    ".svn",
    "node_modules",
    ".ipynb_checkpoints",
    ".mypy_cache",
    ".pytest_cache",
    ".ruff_cache",
    ".tox",
    ".nox",
)
IGNORE_FILES = (".gitignore", ".rayignore")
# A walk that finds more than this is almost certainly the wrong folder (a home folder).
MAX_FILES = 100_000
_GITWILD_SPECIAL = re.compile(r"([\\*?\[\]!#])")


class WorkdirError(RaylabError):
    """The working directory cannot be shipped: missing, not a folder, too big."""

    status = 422
    code = "working_dir"


@dataclass(frozen=True)
class WorkdirScan:
    root: Path
    files: tuple[tuple[str, int], ...]  # (path relative to root, POSIX style; bytes)
    # Folders left out because they hold a virtual environment (found by their
    # pyvenv.cfg / conda-meta, whatever their name), relative to root.
    environments: tuple[str, ...] = ()
    user_excludes: tuple[str, ...] = ()
    # Symlinks (relative to root) that lead outside it: left out, never followed.
    outside: tuple[str, ...] = ()
    # Symlinked folders that lead back to a folder above them (a loop): left out, for
    # Ray's walk would follow them until the path is too long.
    loops: tuple[str, ...] = ()
    # Changes when a file is added, removed, resized or touched: a reconnect re-ships
    # then (Ray itself hashes contents, and uploads only what the cluster lacks).
    stamp: str = ""

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self.files)

    def largest(self, count: int = 5) -> list[tuple[str, int]]:
        return sorted(self.files, key=lambda f: (-f[1], f[0]))[:count]

    def ray_excludes(self) -> list[str]:
        """Ray's `excludes`: what this walk left out that Ray's walk would not by itself."""
        left_out = (*self.environments, *self.outside, *self.loops)
        anchored = ["/" + _escape(rel) for rel in left_out]
        return [*ALWAYS_EXCLUDED, *anchored, *self.user_excludes]

    def outside_note(self) -> str | None:
        """One line naming the symlinks left out, for the verbs' warnings (None: none)."""
        if not self.outside:
            return None
        shown = ", ".join(self.outside[:5]) + (" …" if len(self.outside) > 5 else "")
        return (
            f"left out {len(self.outside)} symlink(s) of the working directory that lead "
            f"outside it: {shown}; copy what they point to into the folder to ship it"
        )


@dataclass
class _Walk:
    root: Path
    excludes: PathSpec[Any]
    real_root: Path
    files: list[tuple[str, int]] = field(default_factory=list)
    environments: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)
    loops: list[str] = field(default_factory=list)
    # The folders being walked, from the root down: a folder met again among them is a
    # loop. (Not every folder seen: one reached twice, by its name and by a symlink,
    # ships twice, as Ray's walk ships it.)
    ancestors: set[tuple[int, int]] = field(default_factory=set)
    stamp: Any = field(default_factory=hashlib.sha256)


def check_folder(path: str, cwd: Path, option: str = "working-dir") -> Path:
    """The folder (`path` as typed, relative to `cwd`) as an absolute path, or one clear
    error."""
    field = option.replace("-", "_")
    if "\0" in path:
        raise SpecError(field, f"{path!r} is not a path")
    folder = Path(cwd, Path(path).expanduser())
    if not folder.exists():
        raise SpecError(field, f"{path!r} does not exist; give the folder to ship, or --no-sync")
    if not folder.is_dir():
        raise SpecError(field, f"{path!r} is not a folder")
    return folder.resolve()


def check_patterns(patterns: Iterable[str]) -> tuple[str, ...]:
    out = []
    for p in patterns:
        if not p.strip() or "\n" in p:
            raise SpecError("exclude", f"{p!r} is not a pattern such as data/ or *.ckpt")
        try:
            PathSpec.from_lines("gitignore", [p])
        except Exception:  # pathspec raises assorted errors for bad patterns
            raise SpecError("exclude", f"{p!r} is not a gitignore-style pattern") from None
        out.append(p)
    return tuple(out)


def scan(root: Path, user_excludes: Sequence[str] = ()) -> WorkdirScan:
    """Every file Ray would ship from `root`, with the excludes above."""
    spec = PathSpec.from_lines("gitignore", [*ALWAYS_EXCLUDED, *user_excludes])
    walk = _Walk(root, spec, root.resolve())
    _visit(walk, root, [])
    return WorkdirScan(
        root,
        tuple(walk.files),
        tuple(walk.environments),
        tuple(user_excludes),
        tuple(walk.outside),
        tuple(walk.loops),
        walk.stamp.hexdigest(),
    )


def check_size(result: WorkdirScan, max_bytes: int) -> None:
    total = result.total_bytes
    if total <= max_bytes:
        return
    largest = ", ".join(f"{rel} ({format_size(size)})" for rel, size in result.largest())
    raise WorkdirError(
        f"the working directory {result.root} holds {format_size(total)} to ship, over the "
        f"{format_size(max_bytes)} limit; largest files: {largest}",
        detail="leave them out in a .rayignore file there (gitignore syntax, e.g. data/) "
        "or with --exclude PATTERN, ship a smaller folder with --working-dir PATH, or "
        "connect without it: --no-sync. Nothing was created or connected.",
    )


def _visit(walk: _Walk, folder: Path, specs: list[tuple[Path, PathSpec[Any]]]) -> None:
    try:
        st = folder.stat()
    except OSError:
        return
    key = (st.st_dev, st.st_ino)
    if key in walk.ancestors:  # a symlink back up: a loop
        walk.loops.append(folder.relative_to(walk.root).as_posix())
        return
    walk.ancestors.add(key)
    try:
        _visit_entries(walk, folder, specs)
    finally:
        walk.ancestors.discard(key)


def _visit_entries(walk: _Walk, folder: Path, specs: list[tuple[Path, PathSpec[Any]]]) -> None:
    own = [(folder, s) for s in _ignore_specs(folder)]
    specs = specs + own
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        path = Path(entry.path)
        rel = path.relative_to(walk.root).as_posix()
        if walk.excludes.match_file(rel) or any(
            s.match_file(path.relative_to(base).as_posix()) for base, s in specs
        ):
            continue
        if entry.is_symlink() and not leads_inside(path, walk.real_root):
            walk.outside.append(rel)
            continue
        try:
            is_dir = entry.is_dir()  # follows symlinks (inside the folder), as Ray's walk does
        except OSError:
            continue
        if is_dir:
            if (path / "pyvenv.cfg").is_file() or (path / "conda-meta").is_dir():
                walk.environments.append(rel)
                continue
            _visit(walk, path, specs)
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        walk.files.append((rel, st.st_size))
        walk.stamp.update(f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
        if len(walk.files) > MAX_FILES:
            raise WorkdirError(
                f"the working directory {walk.root} holds more than {MAX_FILES} files",
                detail="ship the folder your code needs with --working-dir PATH, leave "
                "big folders out in .rayignore or with --exclude, or use --no-sync",
            )


def leads_inside(link: Path, real_root: Path) -> bool:
    """Whether the symlink `link`, fully resolved (links to links, `..`), stays under
    `real_root` (itself resolved). A dangling link resolves to where it points."""
    return Path(os.path.realpath(link)).is_relative_to(real_root)


def _ignore_specs(folder: Path) -> list[PathSpec[Any]]:
    specs = []
    for name in IGNORE_FILES:
        path = folder / name
        if path.is_file():
            try:
                lines = path.read_text(errors="replace").splitlines()
            except OSError:
                continue
            specs.append(PathSpec.from_lines("gitignore", lines))
    return specs


def _escape(rel: str) -> str:
    """A path as a gitignore pattern that matches only itself."""
    escaped = _GITWILD_SPECIAL.sub(r"\\\1", rel)
    return escaped.rstrip(" ") + "\\ " * (len(escaped) - len(escaped.rstrip(" ")))
