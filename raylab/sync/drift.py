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
    owners = md.packages_distributions()
    out: dict[str, str] = {}
    for module in modules:
        if module in sys.stdlib_module_names:
            continue
        for dist in owners.get(module, ()):
            name = normalize(dist)
            if name in NEVER_SHIPPED:
                continue
            try:
                out[name] = md.version(dist)
            except md.PackageNotFoundError:
                continue
    return out


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


def check(cells: Iterable[str]) -> list[str]:
    """The warning lines for this kernel's notebook and the connected cluster."""
    try:
        kernel = kernel_versions(imported_modules(cells))
    except Exception:  # a cell IPython cannot transform: no warning is worth a failed connect
        return []
    if not kernel:
        return []  # nothing to compare: no remote call
    try:
        cluster = cluster_versions(sorted(kernel))
    except Exception as exc:  # a busy or broken cluster: say so, do not fail the connect
        return [f"could not compare package versions with the cluster ({type(exc).__name__})"]
    return differences(kernel, cluster)
