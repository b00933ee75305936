"""What the pipeline takes from the cluster's environment (environment.py, remembered by
the cluster): the same modules, requirements and environment-variable names.

Modules are copied into the project beside its package, as top-level modules: the
Python packages and modules at the top of the working directory, and the packages the
kernel had from local files (editable installs, local wheels), which no index has.
Dagster's process imports them from the installed project, and the pipeline's workers
get them as `py_modules`. Data files of the working directory stay out (a pipeline reads
its inputs from where production keeps them), and so do env-var values: names only.
Nor is anything a symlink leads to outside its folder (the working directory's, a local
package's): it is listed in EXPORT.md, never copied into a project meant to be shared.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..model import ClusterEnvironment, format_size
from ..sync.packages import NEVER_SHIPPED, default_cache, find, unpacked_wheel
from ..sync.workdir import leads_inside, scan


@dataclass(frozen=True)
class Carried:
    modules: tuple[str, ...] = ()  # top-level import names copied into the project
    files: dict[str, bytes] = field(default_factory=dict)  # project path -> content
    requirements: tuple[str, ...] = ()
    env_names: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # what could not be carried, and why

    @property
    def package_modules(self) -> list[str]:
        """The modules that are folders (the others are single .py files)."""
        return sorted({p.split("/", 1)[0] for p in self.files if "/" in p})

    @property
    def file_modules(self) -> list[str]:
        return sorted(p for p in self.files if "/" not in p)


def carried(env: ClusterEnvironment | None, package: str, max_bytes: int) -> Carried:
    if env is None:
        return Carried()
    files: dict[str, bytes] = {}
    modules: list[str] = []
    notes: list[str] = []
    taken = {package, "tests"}  # the project's own top-level folders
    # (module name, {path in the project: file}), in order of precedence.
    sources: list[tuple[str, dict[str, Path]]] = []
    if env.working_dir and Path(env.working_dir).is_dir():
        sources += _workdir_modules(Path(env.working_dir), env.excludes, notes)
    elif env.working_dir:
        notes.append(f"the working directory {env.working_dir} is not on this machine")
    found, missing = find(env.local_packages)
    notes += [f"local package {name} is not installed in this kernel" for name in missing]
    paths = [Path(x) for p in found for x in p.paths]
    for wheel in env.wheels:
        if Path(wheel).is_file():
            paths += [Path(x) for x in unpacked_wheel(wheel, default_cache())]
        else:
            notes.append(f"wheel {wheel} is not on this machine")
    sources += [(_module_name(x), _files(_module_name(x), x, notes)) for x in paths]
    total = 0
    for name, content in sources:
        if not name.isidentifier() or name in modules:
            continue  # a .dist-info folder, or the same module twice (the first wins)
        if name in NEVER_SHIPPED or name in ("setup", "conftest"):
            continue  # not the notebook's code, or a file that would act on the project
        if name in taken:
            notes.append(f"module {name} has the name of the project's own {name}/; rename "
                         "one to carry it")  # fmt: skip
            continue
        size = sum(p.stat().st_size for p in content.values())
        if total + size > max_bytes:
            notes.append(f"module {name} ({format_size(size)}) would take the project over "
                         f"{format_size(max_bytes)}")  # fmt: skip
            continue
        total += size
        modules.append(name)
        files.update({rel: path.read_bytes() for rel, path in content.items()})
    return Carried(tuple(modules), files, env.pip, env.env_names, tuple(notes))


def _workdir_modules(
    root: Path, excludes: tuple[str, ...], notes: list[str]
) -> list[tuple[str, dict[str, Path]]]:
    """Top-level packages (with their shipped files) and .py modules of the folder."""
    found: dict[str, dict[str, Path]] = {}
    result = scan(root, excludes)
    notes += [f"{rel} in the working directory, a symlink that leads outside it"
              for rel in result.outside]  # fmt: skip
    for rel, _ in result.files:
        top = rel.split("/", 1)[0]
        if "/" not in rel and rel.endswith(".py") and rel[:-3].isidentifier():
            found[rel[:-3]] = {rel: root / rel}
        elif "/" in rel and top.isidentifier() and (root / top / "__init__.py").is_file():
            found.setdefault(top, {})[rel] = root / rel
    return sorted(found.items())


def report_lines(c: Carried) -> list[str]:
    if not (c.modules or c.requirements or c.env_names or c.notes):
        return []
    lines = ["", "## From the cluster's environment", ""]
    if c.modules:
        lines.append("Modules copied beside the package (workers get them as `py_modules`): "
                     + ", ".join(f"`{m}`" for m in c.modules) + ".")  # fmt: skip
    if c.requirements:
        lines.append("Requirements: " + ", ".join(f"`{r}`" for r in c.requirements) + ".")
    if c.env_names:
        lines.append("Environment variables (names; the values come from where Dagster "
                     "runs): " + ", ".join(f"`{n}`" for n in c.env_names) + ".")  # fmt: skip
    lines += [f"- Not carried: {n}." for n in c.notes]
    return lines


def _module_name(path: Path) -> str:
    return path.stem if path.suffix == ".py" else path.name


def _files(name: str, source: Path, notes: list[str]) -> dict[str, Path]:
    """A local package's files (os.walk does not enter symlinked folders; a symlinked
    file that leads outside the package is left out and noted)."""
    if source.is_file():
        return {f"{name}.py": source}
    out = {}
    real_root = source.resolve()
    for top, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for file in sorted(names):
            if not file.endswith((".pyc", ".pyo")):
                path = Path(top, file)
                rel = f"{name}/{path.relative_to(source).as_posix()}"
                if path.is_symlink() and not leads_inside(path, real_root):
                    notes.append(f"{rel} of a local package, a symlink that leads outside it")
                    continue
                out[rel] = path
    return out
