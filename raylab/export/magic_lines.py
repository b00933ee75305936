"""What becomes of IPython's magics and shell escapes in a pipeline.

IPython's own `TransformerManager` turns `%pip install x` into
`get_ipython().run_line_magic('pip', 'install x')` and `!nvidia-smi` into
`get_ipython().system('nvidia-smi')`; each such call is decided here. None of them is ever
emitted: package installs become declared dependencies, a few magics keep the Python they
wrap (`%time stmt`), everything else is dropped with the reason in EXPORT.md.
"""

from __future__ import annotations

import ast
import re
import shlex
from dataclasses import dataclass
from typing import Literal

Action = Literal["drop", "keep", "dependency"]

# Options of `pip install` that take a value: the value is not a requirement.
_PIP_VALUE_OPTIONS = frozenset(
    ["-r", "--requirement", "-c", "--constraint", "-i", "--index-url", "--extra-index-url",
     "-e", "--editable", "-t", "--target", "-f", "--find-links", "--trusted-host", "--prefix",
     "--root", "--src", "--upgrade-strategy", "--progress-bar", "--python-version",
     "--platform", "--implementation", "--abi", "--cache-dir", "--log", "--proxy",
     "--retries", "--timeout", "--exists-action", "--cert", "--client-cert",
     "--only-binary", "--no-binary"]
)  # fmt: skip
_SHELL_OPERATORS = frozenset({"&&", "||", ";", "|", ">", ">>", "<", "&"})
# A PEP 508 requirement without URL or path: name[extras] then version specifiers/markers
# (fullmatch, and `.` stops at a newline: "numpy\n" is not a requirement).
_REQUIREMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._, -]+\])?([<>=!~;].*)?")
# Pinned by the generated project itself; a notebook's own install of them is not copied.
PINNED_BY_EXPORT = frozenset({"ray", "dagster", "dagster-ray"})

_WHY = {
    "raycluster": "the pipeline's Ray resource provides the cluster",
    "load_ext": "IPython extension",
    "reload_ext": "IPython extension",
    "unload_ext": "IPython extension",
    "matplotlib": "display setting",
    "config": "IPython setting",
    "autoreload": "development helper",
    "aimport": "development helper",
    "timeit": "timing only (timeit runs the statement in a namespace of its own)",
    "cd": "changes the working directory; the pipeline keeps its own (use absolute paths)",
    "run": "runs another file, whose code is not copied; move it into the notebook or a module",
    "conda": "conda packages are not declared; put them in the image",
    "mamba": "conda packages are not declared; put them in the image",
}
_HELP = frozenset({"pinfo", "pinfo2", "psource", "pdoc", "pdef", "pfile", "who", "whos", "who_ls"})


@dataclass(frozen=True)
class Decision:
    action: Action
    written: str  # how the user wrote it: "%pip install x", "!nvidia-smi"
    why: str
    requirements: tuple[str, ...] = ()
    code: str | None = None  # the Python kept in place of the magic
    env_names: tuple[str, ...] = ()
    env_values: tuple[str, ...] = ()  # what `%env K=V` sets: never shown, never copied


def ipython_call(node: ast.AST) -> tuple[str, list[str]] | None:
    """(method, string arguments) when `node` is a `get_ipython().method('...')` call."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    inner = node.func.value
    if not (
        isinstance(inner, ast.Call)
        and isinstance(inner.func, ast.Name)
        and inner.func.id == "get_ipython"
    ):
        return None
    args = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    return node.func.attr, args


def uses_ipython(node: ast.AST) -> bool:
    """True when `get_ipython` (IPython's own handle) appears anywhere in `node`."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and sub.id == "get_ipython":
            return True
        if isinstance(sub, ast.Attribute) and sub.attr == "get_ipython":
            return True
    return False


def decide(method: str, args: list[str]) -> Decision:
    if method == "run_line_magic" and args:
        name, line = args[0], args[1] if len(args) > 1 else ""
        return _line_magic(name, line.strip())
    if method in ("system", "getoutput") and args:
        return _shell(args[0].strip())
    return Decision("drop", f"get_ipython().{method}(...)", "IPython call")


def _line_magic(name: str, line: str) -> Decision:
    written = f"%{name} {line}".rstrip()
    if name == "pip":
        return _pip(written, shlex_split(line))
    if name in ("env", "set_env"):
        names = tuple(_env_names(line))
        why = "environment setting; its value is not copied"
        value = _env_value(line)
        if names:
            why += f": set {', '.join(names)} where the pipeline runs"
        if value:  # the report shows the name, never the value
            written = f"%{name} {names[0] if names else '…'}=…"
        return Decision("drop", written, why, env_names=names, env_values=(value,) if value else ())
    if name in ("time", "prun") and line and not line.startswith("-"):
        return Decision("keep", written, f"%{name} dropped, the statement kept", code=line)
    if name in _HELP:
        return Decision("drop", written, "help")
    return Decision("drop", written, _WHY.get(name, f"IPython magic %{name}"))


def _shell(command: str) -> Decision:
    written = f"!{command}"
    words = shlex_split(command)
    install = _pip_install_args(words)
    if install is not None:
        if _SHELL_OPERATORS & set(words):
            return Decision("drop", written, "shell command with a pip install inside; "
                            "declare the packages yourself")  # fmt: skip
        return _pip(written, ["install", *install])
    return Decision("drop", written, "shell command")


def _pip_install_args(words: list[str]) -> list[str] | None:
    """The arguments after `pip install` in `pip install`, `python -m pip install`, ..."""
    for i, word in enumerate(words[:-1]):
        base = word.rsplit("/", 1)[-1]
        if base in ("pip", "pip3") and words[i + 1] == "install":
            return words[i + 2 :]
    return None


def _pip(written: str, words: list[str]) -> Decision:
    if not words or words[0] != "install":
        return Decision("drop", written, "pip command other than install")
    requirements: list[str] = []
    skipped: list[str] = []
    it = iter(words[1:])
    for word in it:
        if word.startswith("-"):
            if word in _PIP_VALUE_OPTIONS:
                skipped.append(f"{word} {next(it, '')}".strip())
            elif word.split("=", 1)[0] in _PIP_VALUE_OPTIONS:
                skipped.append(word)
            continue
        if "{" in word or "$" in word or not _REQUIREMENT.fullmatch(word):
            skipped.append(word)
            continue
        if _project(word) in PINNED_BY_EXPORT:
            skipped.append(f"{word} (pinned by the export)")
            continue
        requirements.append(word)
    why = "declared as dependencies" if requirements else "nothing to declare"
    if skipped:
        why += f"; not copied: {', '.join(skipped)}"
    action: Action = "dependency" if requirements else "drop"
    return Decision(action, written, why, requirements=tuple(requirements))


def _project(requirement: str) -> str:
    name = re.split(r"[\[<>=!~;\s]", requirement, maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def _env_names(line: str) -> list[str]:
    """`%env A=1`, `%env A 1`, `%set_env A=1` -> ["A"]; `%env` alone lists, sets nothing."""
    first = line.split("=", 1)[0].split(None, 1)
    return [first[0]] if first and first[0].isidentifier() else []


def _env_value(line: str) -> str:
    """The value `%env A=1`, `%env A 1` or `%set_env A=1` sets ("" when it sets none)."""
    head, sep, value = line.partition("=")
    if sep and " " not in head.strip():
        return value.strip()
    parts = line.split(None, 1)
    return parts[1].strip() if len(parts) == 2 else ""


def shlex_split(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()
