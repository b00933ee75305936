"""`%raycluster pip install …`: pip in the kernel, then the same packages for the workers.

Index requirements (`transformers==4.46`) join the cluster's pip list. Local wheels and
folders need no entry: once installed in the kernel they are local packages, which every
connect ships by itself (packages.py).
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..errors import RaylabError

# pip install options that take a value (so the value is not read as a package).
_WITH_VALUE = frozenset(
    {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c", "--constraint",
     "-t", "--target", "--prefix", "--root", "--platform", "--python-version",
     "--implementation", "--abi", "--upgrade-strategy", "--progress-bar", "--src",
     "--cache-dir", "--log", "--proxy", "--retries", "--timeout", "--trusted-host", "--cert",
     "--client-cert", "-C", "--config-settings", "--global-option", "--report",
     "--no-binary", "--only-binary"}
)  # fmt: skip
_PIP_LINE = re.compile(r"^\s*[%!]\s*pip3?\s+install\s+(.+)$", re.MULTILINE)


class PipFailed(RaylabError):
    status = 422
    code = "pip_failed"


@dataclass(frozen=True)
class PipArgs:
    argv: tuple[str, ...]  # what goes to `pip install`
    index: tuple[str, ...]  # requirements the cluster's pip installs too
    local: tuple[str, ...]  # wheels and folders: shipped as local packages once installed


def parse_install(argv: list[str]) -> PipArgs:
    index: list[str] = []
    local: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        name = arg.split("=", 1)[0]
        if arg in ("-r", "--requirement") or name == "--requirement":
            path = argv[i + 1] if "=" not in arg and i + 1 < len(argv) else arg.partition("=")[2]
            index.extend(_requirement_lines(path))
            i += 2 if "=" not in arg else 1
            continue
        if arg in ("-e", "--editable"):
            if i + 1 < len(argv):
                local.append(argv[i + 1])
            i += 2
            continue
        if arg.startswith("-"):
            i += 2 if arg in _WITH_VALUE else 1
            continue
        if _is_local(arg):
            local.append(arg)
        else:
            index.append(arg)
        i += 1
    if not index and not local:
        raise PipFailed(
            "pip install needs at least one package",
            detail="for example: %raycluster pip install transformers==4.46",
        )
    return PipArgs(tuple(argv), tuple(index), tuple(local))


def pip_lines(cell: str) -> list[list[str]]:
    """The arguments of each `%pip install` / `!pip install` line of a cell."""
    out = []
    for match in _PIP_LINE.finditer(cell):
        try:
            out.append(shlex.split(match.group(1).split(" #", 1)[0]))
        except ValueError:
            continue
    return out


def install_in_kernel(args: PipArgs, line: Callable[[str], None]) -> None:
    """Run pip with this kernel's Python, showing its output as it comes."""
    command = [sys.executable, "-m", "pip", "install", *args.argv]
    with subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        errors = []
        for text in proc.stdout:
            text = text.rstrip("\n")
            line(text)
            if text.startswith("ERROR:"):
                errors.append(text)
        code = proc.wait()
    if code != 0:
        raise PipFailed(
            f"pip install failed in this kernel (exit {code})"
            + (f": {errors[-1][len('ERROR: ') :]}" if errors else ""),
            detail="nothing was added to the cluster's environment",
        )
    import importlib

    importlib.invalidate_caches()  # the new packages import at once


def synced_install(cell: str) -> tuple[list[str], bool]:
    """The index requirements of a cell's `%pip install` lines that did install, and
    whether they installed local wheels or folders (shipped by the reconnect)."""
    from importlib.metadata import PackageNotFoundError, version

    from .packages import requirement_name

    out = []
    local = False
    for argv in pip_lines(cell):
        try:
            parsed = parse_install(argv)
        except PipFailed:
            continue
        local = local or bool(parsed.local)
        for requirement in parsed.index:
            name = requirement_name(requirement)
            try:
                if name:
                    version(name)  # %pip reports no failure to the cell: check it installed
                    out.append(requirement)
            except PackageNotFoundError:
                continue
    return out, local


def _is_local(arg: str) -> bool:
    return arg.endswith(".whl") or arg.startswith((".", "/", "~")) or Path(arg).is_dir()


def _requirement_lines(path: str) -> list[str]:
    try:
        text = Path(path).expanduser().read_text()
    except OSError:
        raise PipFailed(f"requirements file {path!r} cannot be read") from None
    lines = (ln.split(" #", 1)[0].strip() for ln in text.splitlines())
    return [ln for ln in lines if ln and not ln.startswith(("#", "-"))]
