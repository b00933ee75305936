"""Version drift between the kernel and the cluster, for the packages the notebook imports.

An object pickled by one numpy often fails to load in another; a model saved by one
torch minor may not load in the next. On connect, the distributions behind the notebook's
own `import` statements are looked up on both sides, and each that differs in its major
or minor version gets one warning line. Patch versions are left alone: they are meant to
be compatible, and warning about them would teach people to ignore the warnings.
"""

from __future__ import annotations

import ast
import importlib.metadata as md
import re
import sys
import threading
from collections.abc import Iterable
from typing import Any

from .packages import NEVER_SHIPPED, normalize

_MAJOR_MINOR = re.compile(r"^(\d+)\.(\d+)")
TIMEOUT_S = 60.0


def imported_modules(cells: Iterable[str]) -> set[str]:
    """Top-level module names that `import` statements in the cells name."""
    from IPython.core.inputtransformer2 import TransformerManager

    transform = TransformerManager().transform_cell  # type: ignore[no-untyped-call]
    names: set[str] = set()
    for cell in cells:
        try:
            tree = ast.parse(transform(cell))
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def kernel_versions(modules: Iterable[str]) -> dict[str, str]:
    """{distribution: version} in this kernel for the modules (stdlib and Ray left out)."""
    wanted = [m for m in modules if m not in sys.stdlib_module_names]
    if not wanted:
        return {}  # packages_distributions() below reads every installed file list
    owners = md.packages_distributions()
    out: dict[str, str] = {}
    for module in wanted:
        for dist in owners.get(module, ()):
            name = normalize(dist)
            if name in NEVER_SHIPPED:
                continue
            try:
                out[name] = md.version(dist)
            except md.PackageNotFoundError:
                continue
    return out


class KernelSide:
    """This kernel's versions of what the cells import, looked up in a thread from the
    moment `up` or `connect` begins: mapping modules to distributions reads every
    installed distribution's file list, a second or more of a first cell's wait in a
    large environment, which the wait for the cluster hides."""

    def __init__(self, cells: Iterable[str]) -> None:
        self._cells = list(cells)
        self._found: dict[str, str] = {}
        self._thread = threading.Thread(target=self._look, name="raylab-drift", daemon=True)
        self._thread.start()

    def _look(self) -> None:
        try:
            self._found = kernel_versions(imported_modules(self._cells))
        except Exception:  # a cell IPython cannot transform: no warning is worth a failed connect
            self._found = {}

    def versions(self) -> dict[str, str]:
        self._thread.join()
        return self._found


def differences(kernel: dict[str, str], cluster: dict[str, str | None]) -> list[str]:
    """One line per distribution on both sides whose major or minor version differs."""
    lines = []
    for name in sorted(kernel):
        there = cluster.get(name)
        if there is None:
            continue
        here_mm, there_mm = _MAJOR_MINOR.match(kernel[name]), _MAJOR_MINOR.match(there)
        if here_mm and there_mm and here_mm.groups() != there_mm.groups():
            lines.append(
                f"{name} {kernel[name]} in this kernel, {there} on the cluster: objects "
                "passed between them may not load; install the same version on both "
                f"(`%raycluster pip install {name}=={kernel[name]}`)"
            )
    return lines


def cluster_versions(names: list[str], timeout: float = TIMEOUT_S) -> dict[str, str | None]:
    """The versions the cluster's workers (in this connection's environment) see."""
    import ray

    # Defined here, so cloudpickle sends it by value: the cluster need not have raylab.
    def versions(wanted: list[str]) -> dict[str, str | None]:
        import importlib.metadata as metadata

        found: dict[str, str | None] = {}
        for name in wanted:
            try:
                found[name] = metadata.version(name)
            except metadata.PackageNotFoundError:
                found[name] = None
        return found

    task: Any = ray.remote(num_cpus=0)(versions)
    result: dict[str, str | None] = ray.get(task.remote(names), timeout=timeout)
    return result


def check(kernel_side: KernelSide) -> list[str]:
    """The warning lines for this kernel's notebook and the connected cluster."""
    kernel = kernel_side.versions()
    if not kernel:
        return []  # nothing to compare: no remote call
    try:
        cluster = cluster_versions(sorted(kernel))
    except Exception as exc:  # a busy or broken cluster: say so, do not fail the connect
        return [f"could not compare package versions with the cluster ({type(exc).__name__})"]
    return differences(kernel, cluster)
