"""Packages of the kernel that no index has: what `py_modules` ships to the workers.

A distribution installed in development mode (`pip install -e .`) or from a local file
(a wheel someone built, a folder) is found by its `direct_url.json` (PEP 610), which
pip writes for exactly these. Its importable top-level packages and modules go to the
cluster as files, together with its `.dist-info` folder so that
`importlib.metadata.version()` answers on the workers as in the kernel. Nothing is
installed on the workers: no index is needed (a worker's pip would need one for a
wheel's dependencies, even those already installed), and an edit to an editable
package reaches the workers on the next connect.

Local wheel files named with `--pip` are unpacked once into raylab's cache and shipped
the same way.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import importlib.util
import json
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ..errors import SpecError

# On the cluster already (Ray must match the kernel's), or of no use there.
NEVER_SHIPPED = frozenset({"ray", "raylab"})
_SKIP_TOP = ("__pycache__", "..")


@dataclass(frozen=True)
class LocalPackage:
    name: str  # normalized distribution name
    version: str
    paths: tuple[str, ...]  # package folders, module files and the .dist-info folder
    editable: bool

    @property
    def size(self) -> int:
        return sum(_size(Path(p)) for p in self.paths)


def normalize(name: str) -> str:
    """PEP 503 name: My_Lib and my-lib are one distribution."""
    return str(canonicalize_name(name))


def requirement_name(requirement: str) -> str | None:
    """The distribution a pip requirement names ("numpy>=2" -> numpy, "lib @ URL" ->
    lib), if it names one: not a path, a bare URL or a pip option."""
    try:
        return normalize(Requirement(requirement).name)
    except InvalidRequirement:
        return None


def local_packages(skip: Iterable[str] = ()) -> list[LocalPackage]:
    """Every distribution of this kernel installed in development mode or from a local file."""
    skipped = {normalize(s) for s in skip} | NEVER_SHIPPED
    found: dict[str, LocalPackage] = {}
    for dist in md.distributions():
        name = normalize(dist.metadata["Name"] or "")
        if not name or name in skipped or name in found:
            continue  # the first on sys.path is the one the kernel imports
        origin = _local_origin(dist)
        if origin is None:
            continue
        source, editable = origin
        paths = _import_paths(dist, source if editable else None)
        if paths:
            found[name] = LocalPackage(name, dist.version, tuple(paths), editable)
    return sorted(found.values(), key=lambda p: p.name)


def find(names: Iterable[str]) -> tuple[list[LocalPackage], list[str]]:
    """The local packages of these names in this kernel, and the names not found."""
    wanted = [normalize(n) for n in names]
    here = {p.name: p for p in local_packages()}
    return [here[n] for n in wanted if n in here], [n for n in wanted if n not in here]


def wheel_name(path: str) -> str:
    return normalize(Path(path).name.split("-", 1)[0])


def check_wheel(path: str, cwd: Path) -> str:
    """A local wheel file (`path` as typed, relative to `cwd`) as an absolute path, or one
    clear error."""
    if "\0" in path:
        raise SpecError("pip", f"{path!r} is not a path")
    wheel = Path(cwd, Path(path).expanduser())
    if not wheel.is_file():
        raise SpecError("pip", f"{path!r} does not exist (a local wheel file was expected)")
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.namelist()
    except (OSError, zipfile.BadZipFile):
        raise SpecError("pip", f"{path!r} is not a wheel (not a zip file)") from None
    return str(wheel.resolve())


def unpacked_wheel(path: str, cache: Path) -> list[str]:
    """The wheel's top-level entries, unpacked once into `cache` (keyed by its content)."""
    wheel = Path(path)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()[:16]
    target = cache / f"{wheel.stem}-{digest}"
    if not target.is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".unpack-", dir=cache))
        try:
            with zipfile.ZipFile(wheel) as zf:
                zf.extractall(staging)
            _merge_data_libs(staging)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return [str(p) for p in sorted(target.iterdir()) if _shippable(p)]


def default_cache() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "raylab" / "wheels"


def _merge_data_libs(root: Path) -> None:
    """A wheel's NAME.data/purelib and platlib belong at the top; scripts and headers
    have no place on sys.path."""
    for data in root.glob("*.data"):
        for lib in ("purelib", "platlib"):
            folder = data / lib
            if folder.is_dir():
                for entry in folder.iterdir():
                    entry.rename(root / entry.name)
        shutil.rmtree(data)


def _local_origin(dist: md.Distribution) -> tuple[Path, bool] | None:
    """(where it was installed from, editable) for a local install; None otherwise."""
    try:
        text = dist.read_text("direct_url.json")
    except OSError:
        return None
    if not text:
        return None
    try:
        data = json.loads(text)
        url = urlparse(str(data["url"]))
    except (ValueError, KeyError, TypeError):
        return None
    if url.scheme != "file" or "vcs_info" in data:
        return None
    editable = bool((data.get("dir_info") or {}).get("editable"))
    return Path(unquote(url.path)), editable


def _import_paths(dist: md.Distribution, project: Path | None) -> list[str]:
    """The dist's top-level packages and modules, and its .dist-info folder.

    For an editable install the code is in the project folder (reached through a .pth
    file or an import hook): the names come from its top_level.txt or from the project's
    layout, and each counts only where this kernel really imports it from there."""
    paths: list[str] = []
    names: set[str] = set()
    info_dir: str | None = None
    for file in dist.files or ():
        parts = file.parts
        if not parts or parts[0] in _SKIP_TOP:
            continue
        top = parts[0]
        if top.endswith(".dist-info"):
            info_dir = str(dist.locate_file(top))
        elif project is None and not top.endswith((".data", ".pth")) and _importable(top):
            names.add(top)
    if project is None:
        for top in sorted(names):
            located = Path(str(dist.locate_file(top)))
            if located.exists():
                paths.append(str(located))
    else:
        paths.extend(_editable_paths(dist, project))
    if paths and info_dir and Path(info_dir).is_dir():
        paths.append(info_dir)
    return paths


def _editable_paths(dist: md.Distribution, project: Path) -> list[str]:
    candidates = set((dist.read_text("top_level.txt") or "").split())
    for folder in (project, project / "src"):
        if folder.is_dir():
            candidates.update(p.name for p in folder.iterdir() if _importable(p.name))
    out = []
    root = project.resolve()
    for name in sorted(candidates):
        module = name[:-3] if name.endswith(".py") else name
        if not module.isidentifier():
            continue
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        if spec.submodule_search_locations:
            locations = list(spec.submodule_search_locations)
            where = Path(locations[0]) if len(locations) == 1 else None
        else:
            where = Path(spec.origin) if spec.origin else None
        if where is not None and where.resolve().is_relative_to(root):
            out.append(str(where))
    return out


def _importable(name: str) -> bool:
    stem = name[:-3] if name.endswith(".py") else name
    return stem.isidentifier() and not stem.startswith("_") and stem not in ("setup", "conftest")


def _shippable(path: Path) -> bool:
    return path.name not in _SKIP_TOP and (path.is_dir() or path.suffix == ".py")


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
