"""The verbs' command line: one argparse parser for `%raycluster` and `raylab`, and the
friendlier messages it gives for mistakes."""

from __future__ import annotations

import argparse
import difflib
from typing import Any, NoReturn

from ..backends import BACKENDS
from ..culler.options import add_culler_arguments
from ..errors import SpecError
from ..export.verb import HELP as EXPORT_HELP
from ..export.verb import add_export_arguments
from ..spec import REQUEST_FIELDS, parse_since
from .environment import add_environment_arguments

VERBS = {
    "up": "create a cluster (or reuse yours of that name), wait for it, connect",
    "down": "delete a cluster and everything it runs",
    "list": "your clusters",
    "status": "one cluster's status (the connected one by default)",
    "connect": "connect this kernel to a cluster",
    "disconnect": "disconnect this kernel",
    "scale": "change the number of workers",
    "suspend": "stop a cluster's processes/pods, keeping its definition",
    "resume": "start a suspended cluster again",
    "logs": "the head's log",
    "dashboard": "the Ray dashboard's address",
    "env": "shell lines that point Ray's own tools (ray job submit …) at a cluster of yours",
    "keep": "keep an idle cluster running: restart its idle clock (alias keep-running)",
    "usage": "GPU-hours per user and GPU type",
    "culler": "suspend idle clusters and record GPU-hours (a service: JupyterHub, Deployment)",
    "export": EXPORT_HELP,
    "pip": "pip install PKG…: install into this kernel and add to the cluster's environment",
    "job": "logs|stop|result NAME: a job made by `%%raycluster job` (a cell run as a Ray Job)",
    "jobs": "the Ray Jobs on your clusters",
    "capacity": "what a cluster of N GPUs would get now: free, or its place in the queue",
    "serve": "a cluster's Ray Serve apps (the connected one by default) and their URLs",
}


class CommandError(Exception):
    """Bad command-line input: shown as one line, no traceback."""


class HelpShown(Exception):
    """--help was asked for; the text is the message."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise CommandError(_friendlier(message, self))

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise HelpShown(self.format_help())

    def print_help(self, file: Any = None) -> None:
        raise HelpShown(self.format_help())


def _friendlier(message: str, parser: argparse.ArgumentParser) -> str:
    if "required: VERB" in message:
        return f"a verb is required; choose one of: {', '.join(VERBS)} (`{parser.prog} --help`)"
    if "invalid choice" in message and "VERB" in message:
        bad = message.split("invalid choice:", 1)[1].split("(")[0].strip()
        return f"unknown verb {bad}; choose one of: {', '.join(VERBS)}"
    return message


def unknown_argument(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """Name the first argument the verb does not take, with the closest real option."""
    options = [o for a in parser._actions for o in a.option_strings]
    for arg in extra:
        if arg.startswith("-"):
            close = difflib.get_close_matches(arg.split("=")[0], options, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return f"unknown option {arg}{hint} (`{parser.prog} --help` lists them)"
    return f"unexpected argument {extra[0]!r} (`{parser.prog} --help` shows usage)"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog=prog, description="Ray clusters for this notebook.", allow_abbrev=False)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=Parser)
    verbs.required = True

    def verb(name: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=VERBS[name], description=VERBS[name], allow_abbrev=False)
        p.add_argument("--backend", choices=BACKENDS, help="default: the configured one")
        return p

    up = verb("up")
    # The request's fields, as `spec.ClusterSpec` declares them.
    for name, declared in REQUEST_FIELDS.items():
        if declared.flag is not None:
            up.add_argument(declared.flag, dest=name, metavar=declared.metavar, help=declared.help)
    up.add_argument("--no-connect", dest="connect", action="store_false")
    up.add_argument(
        "--no-wait", dest="wait", action="store_false",
        help="return once it is created (with its place in the queue) instead of waiting",
    )  # fmt: skip
    up.add_argument("--timeout", type=_seconds, help="seconds to wait for Ready")
    add_environment_arguments(up)
    for name in ("down", "connect", "scale", "suspend", "resume", "logs", "dashboard", "env"):
        verb(name).add_argument("name", metavar="NAME")
    keep = verbs.add_parser("keep", aliases=["keep-running"], help=VERBS["keep"],
                            description=VERBS["keep"], allow_abbrev=False)  # fmt: skip
    keep.add_argument("--backend", choices=BACKENDS, help="default: the configured one")
    keep.add_argument("name", metavar="NAME")
    usage = verb("usage")
    usage.add_argument("--all", action="store_true", help="every user's (admins)")
    usage.add_argument("--since", default="7d", type=_duration,
                       help="how far back, e.g. 7d, 24h (default 7d)")  # fmt: skip
    add_culler_arguments(verb("culler"))
    verbs.choices["scale"].add_argument("--workers", required=True)
    verbs.choices["logs"].add_argument("--tail", type=int, default=200)
    verbs.choices["connect"].add_argument("--timeout", type=_seconds)
    add_environment_arguments(verbs.choices["connect"])
    verb("list").add_argument("--all", action="store_true", help="every user's (admins)")
    verb("status").add_argument("name", metavar="NAME", nargs="?")
    verb("serve").add_argument("name", metavar="NAME", nargs="?")
    verb("disconnect")
    add_export_arguments(verb("export"))
    add_job_arguments(verb("job"), verb("jobs"))
    capacity = verb("capacity")
    capacity.add_argument("--gpus", help="GPUs in the whole cluster (default from the profile)")
    capacity.add_argument("--gpu-type", dest="gpu_type", help="a configured GPU type")
    pip = verb("pip")
    pip.add_argument("action", choices=("install",), metavar="install")
    pip.add_argument("packages", nargs=argparse.REMAINDER, metavar="PKG", help="as for pip")
    return parser


def request_from(args: argparse.Namespace) -> dict[str, Any]:
    """The request fields that `up` was given (its options named for them)."""
    return {
        name: getattr(args, name) for name, declared in REQUEST_FIELDS.items()
        if declared.flag is not None and getattr(args, name) is not None
    }  # fmt: skip


def add_job_arguments(job: argparse.ArgumentParser, jobs: argparse.ArgumentParser) -> None:
    job.add_argument("action", choices=("logs", "stop", "result"), metavar="logs|stop|result")
    job.add_argument("name", metavar="NAME")
    job.add_argument("--follow", action="store_true", help="logs: keep streaming until it ends")
    job.add_argument("--cluster", help="default: the connected cluster, else yours that has it")
    jobs.add_argument("cluster", metavar="CLUSTER", nargs="?", help="default: all of yours")


def subparser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[verb]
            return sub
    return parser


def _duration(text: str) -> float:
    try:
        return parse_since(text)
    except SpecError as exc:
        raise argparse.ArgumentTypeError(exc.message) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text} is out of range; use 1 to 604800 seconds")
    return value
