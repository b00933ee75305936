"""The verbs of `%raycluster` and `raylab`: one parser, one implementation.

Magics and CLI differ only in how they show things (`Output`) and whether they may
connect the current process to a cluster (a kernel may; a shell command may not).
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from . import render
from .backends import BACKENDS, make_backend
from .config import Settings
from .culler.options import add_culler_arguments
from .env_commands import ClusterEnvironments, add_environment_arguments, options_from
from .environment import EnvOptions
from .errors import NotFound, SpecError
from .export.verb import HELP as EXPORT_HELP
from .export.verb import add_export_arguments
from .model import ClusterInfo, Phase
from .service import ClusterService, current_groups, current_user, is_admin

if TYPE_CHECKING:
    from .runtime_env import Prepared

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
}


class CommandError(Exception):
    """Bad command-line input: shown as one line, no traceback."""


class HelpShown(Exception):
    """--help was asked for; the text is the message."""


class Output(Protocol):
    def line(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def table(self, clusters: list[ClusterInfo], owner: bool) -> None: ...
    def block(self, text: str) -> None: ...
    def link(self, url: str, label: str) -> None: ...
    def card(self, info: ClusterInfo, fetch: Callable[[], ClusterInfo] | None = None) -> None:
        """Show the status card; with `fetch`, keep it current where the medium allows."""

    def progress(self, info: ClusterInfo, started: float) -> Any: ...


class _Parser(argparse.ArgumentParser):
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


def _unknown(extra: list[str], parser: argparse.ArgumentParser) -> str:
    """Name the first argument the verb does not take, with the closest real option."""
    options = [o for a in parser._actions for o in a.option_strings]
    for arg in extra:
        if arg.startswith("-"):
            close = difflib.get_close_matches(arg.split("=")[0], options, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return f"unknown option {arg}{hint} (`{parser.prog} --help` lists them)"
    return f"unexpected argument {extra[0]!r} (`{parser.prog} --help` shows usage)"


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = _Parser(prog=prog, description="Ray clusters for this notebook.", allow_abbrev=False)
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    verbs.required = True

    def verb(name: str) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=VERBS[name], description=VERBS[name], allow_abbrev=False)
        p.add_argument("--backend", choices=BACKENDS, help="default: the configured one")
        return p

    up = verb("up")
    up.add_argument("--name", help="DNS label, at most 40 characters (default: generated)")
    up.add_argument("--gpus", help="GPUs in the whole cluster, split evenly across workers")
    up.add_argument("--gpu-type", dest="gpu_type", help="a configured GPU type, e.g. a100")
    up.add_argument("--workers", help="worker nodes (default from the profile)")
    up.add_argument("--cpus", help="CPUs per worker, e.g. 16 or 500m")
    up.add_argument("--memory", help="memory per worker, e.g. 64Gi")
    up.add_argument("--image", help="Ray image (KubeRay)")
    up.add_argument("--min-workers", dest="min_workers", help="autoscaling lower bound")
    up.add_argument("--max-workers", dest="max_workers", help="autoscaling upper bound")
    up.add_argument(
        "--idle-suspend", dest="idle_suspend_minutes", metavar="DURATION",
        help="suspend after this long idle, e.g. 30m (at most your admin's limit)",
    )  # fmt: skip
    up.add_argument("--no-connect", dest="connect", action="store_false")
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
    verb("disconnect")
    add_export_arguments(verb("export"))
    pip = verb("pip")
    pip.add_argument("action", choices=("install",), metavar="install")
    pip.add_argument("packages", nargs=argparse.REMAINDER, metavar="PKG", help="as for pip")
    return parser


def _subparser(parser: argparse.ArgumentParser, verb: str) -> argparse.ArgumentParser:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            sub: argparse.ArgumentParser = action.choices[verb]
            return sub
    return parser


def _duration(text: str) -> float:
    from .spec import parse_duration

    try:
        seconds = parse_duration(text, default_unit="d")
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration such as 7d or 24h") from None
    if seconds <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive duration; use e.g. 7d")
    return seconds


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 7 * 86400:
        raise argparse.ArgumentTypeError(f"{text} is out of range; use 1 to 604800 seconds")
    return value


class Commands:
    def __init__(
        self,
        output: Output,
        *,
        prog: str,
        may_connect: bool,
        settings: Settings | None = None,
        user: str | None = None,
        cells: Callable[[], list[str]] | None = None,
    ) -> None:
        self.out = output
        self.prog = prog
        self.may_connect = may_connect
        self._settings = settings
        self.user = user or current_user()
        self.parser = build_parser(prog)
        # The notebook's cells so far (IPython's In): what it imports, for drift warnings.
        self.cells = cells or (lambda: [])
        self._connected_backend: str | None = None

    def environments(self) -> ClusterEnvironments:
        return ClusterEnvironments(self.settings)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.load()
        return self._settings

    def service(self, backend: str | None) -> ClusterService:
        groups = current_groups() if self.user == current_user() else ()
        admin = is_admin(self.settings, self.user, groups)
        return ClusterService(
            make_backend(backend or self.settings.backend, self.settings), self.settings,
            self.user, admin=admin,
        )  # fmt: skip

    def run_line(self, line: str) -> Any:
        try:
            argv = shlex.split(line)
        except ValueError as exc:
            raise CommandError(f"cannot parse the line: {exc}") from None
        return self.run(argv)

    def run(self, argv: list[str]) -> Any:
        args, extra = self.parser.parse_known_args(argv)
        if extra:
            raise CommandError(_unknown(extra, _subparser(self.parser, args.verb)))
        handler: Callable[[argparse.Namespace], Any] = getattr(
            self, f"do_{args.verb.replace('-', '_')}"
        )
        try:
            return handler(args)
        except SpecError as exc:
            raise CommandError(exc.for_command_line()) from None

    # --- verbs --------------------------------------------------------------------

    def do_up(self, args: argparse.Namespace) -> ClusterInfo:
        fields = ("name", "gpus", "gpu_type", "workers", "cpus", "memory", "image",
                  "min_workers", "max_workers", "idle_suspend_minutes")  # fmt: skip
        request = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
        service = self.service(args.backend)
        timeout = args.timeout or self.settings.profiles.defaults.timeout
        options = options_from(args)
        envs = self.environments()
        # Every check before anything is created; a cluster of yours that exists already
        # keeps what it remembers, with whatever these options change.
        existing = _existing(service, args.name)
        prepared = envs.prepare(options, existing)
        # A shell has no notebook folder: the CLI sets an environment only when asked, and
        # the first kernel that connects gives the cluster its own folder.
        remember = self.may_connect or options.any_given
        started = time.time()
        info, created = service.create(request, prepared.environment if remember else None)
        if created:
            if prepared.values_changed:
                envs.values.save(info, prepared.values)
        else:
            self.out.line(f"{info.name} already exists ({info.phase}); using it.")
            if existing is None:  # made meanwhile, by another kernel
                prepared = envs.prepare(options, info)
            if remember:
                info = envs.remember(service, info, prepared)
        for warning in prepared.warnings:
            self.out.warn(warning)
        if info.logical_gpus and created:
            self.out.warn(
                f"this machine has fewer GPUs than the {info.spec.gpus} requested: the local "
                "backend declares them as logical GPUs (tasks get CUDA_VISIBLE_DEVICES, "
                "not a device)"
            )
        view = self.out.progress(info, started)
        connect = args.connect and self.may_connect
        # One wait: the kernel connects as soon as the head is up, in a thread, while the
        # same loop follows the workers and keeps the card live.
        connecting = _Connecting()

        def done(now: ClusterInfo) -> bool:
            if connect and not connecting.started and now.head_ready:
                self._say_pip(prepared)
                view.update(note="Connecting this kernel through Ray Client…")
                connecting.start(lambda: self._connect(now, service, prepared, args.backend))
            return _ready(now) and (not connect or connecting.finished())

        try:
            info = service.wait(info.name, done, max(1.0, timeout - (time.time() - started)),
                                view)  # fmt: skip
        except Exception:  # not on an interrupt: that returns at once
            connecting.settle()
            raise
        view.stop_clock()
        view.update(info, note="")
        self.out.line(self._connected_note(info) if connect else render.connect_code(info))
        if connect:
            self._drift()
        return info

    def do_down(self, args: argparse.Namespace) -> None:
        from .connect import connected_cluster, disconnect

        service = self.service(args.backend)
        info = service.get(args.name)
        if connected_cluster() == args.name:
            disconnect()
        service.delete(args.name)
        self.environments().forget(info)
        self.out.line(f"Deleted {args.name}.")

    def do_list(self, args: argparse.Namespace) -> list[ClusterInfo]:
        service = self.service(args.backend)
        clusters = service.list(everyone=args.all)
        if args.all and not service.admin:
            self.out.line("Only admins (admin_users, admin_groups) see every user's clusters; "
                          "these are yours.")  # fmt: skip
        self.out.table(clusters, args.all and service.admin)
        for info in clusters:
            hint = render.keep_running_hint(info, self.prog)
            if hint and info.owner == self.user:
                self.out.line(f"{info.name}: {render.idle_text(info)}; {hint}.")
        return clusters

    def do_status(self, args: argparse.Namespace) -> ClusterInfo | list[ClusterInfo]:
        from .connect import connected_cluster

        name = args.name or connected_cluster()
        if name is None:
            return self.do_list(argparse.Namespace(backend=args.backend, all=False))
        service = self.service(args.backend)
        info = service.get(name)
        self.out.card(info, lambda: service.get(name))
        hint = render.keep_running_hint(info, self.prog)
        if hint:
            self.out.line(f"{render.idle_text(info)}: {hint}.")
        return info

    def do_connect(self, args: argparse.Namespace) -> ClusterInfo:
        if not self.may_connect:
            raise CommandError(
                "connect attaches a notebook kernel; in Python use "
                f"`%load_ext raylab` then `%raycluster connect {args.name}`"
            )
        service = self.service(args.backend)
        info = service.get(args.name)
        envs = self.environments()
        prepared = envs.prepare(options_from(args), info)  # checks before connecting
        for warning in prepared.warnings:
            self.out.warn(warning)
        if not info.head_ready:
            timeout = args.timeout or self.settings.profiles.defaults.timeout
            view = self.out.progress(info, time.time())
            info = service.wait(args.name, _head_up, timeout, view)
        self._say_pip(prepared)
        self._connect(info, service, prepared, args.backend)
        # Remembered once it works: a package that breaks the connect is not kept.
        info = envs.remember(service, info, prepared)
        self.out.line(self._connected_note(info))
        self._drift()
        return info

    def do_disconnect(self, args: argparse.Namespace) -> None:
        from .connect import disconnect

        was = disconnect()
        self.out.line(f"Disconnected from {was}." if was else "Not connected to a cluster.")

    def do_scale(self, args: argparse.Namespace) -> ClusterInfo:
        info = self.service(args.backend).scale(args.name, args.workers)
        self.out.line(f"Scaling {info.name} to {info.workers_desired} workers.")
        self.out.card(info)
        return info

    def do_suspend(self, args: argparse.Namespace) -> ClusterInfo:
        info = self.service(args.backend).set_suspended(args.name, True)
        self.out.line(f"Suspended {info.name}; `{self.prog} resume {info.name}` restarts it.")
        return info

    def do_resume(self, args: argparse.Namespace) -> ClusterInfo:
        info = self.service(args.backend).set_suspended(args.name, False)
        self.out.line(f"Resuming {info.name}.")
        self.out.card(info)
        return info

    def do_logs(self, args: argparse.Namespace) -> str:
        text = self.service(args.backend).logs(args.name, max(1, args.tail))
        self.out.block(text)
        return text

    def do_dashboard(self, args: argparse.Namespace) -> str | None:
        service = self.service(args.backend)
        info = service.get(args.name)
        if not info.endpoints.dashboard:
            self.out.line(f"{info.name} has no dashboard while {info.phase}.")
            return None
        # On JupyterHub the kernel knows its server's path: the proxy there holds the token.
        prefix = os.environ.get("JUPYTERHUB_SERVICE_PREFIX") if self.may_connect else None
        if prefix:
            url = f"{prefix.rstrip('/')}/raylab/clusters/{info.name}/dashboard/"
        else:
            url = service.backend.dashboard_address(info) or info.endpoints.dashboard
        self.out.link(url, f"Ray dashboard of {info.name}")
        if not prefix and service.auth_token_in_use(info.name):
            self.out.line(
                "It asks for the cluster's Ray token: open it from JupyterLab's Ray clusters "
                f"sidebar instead (no token needed), or see `{self.prog} env {info.name}`."
            )
        return url

    def do_env(self, args: argparse.Namespace) -> str:
        """`export` lines for a shell; the token stays in a 0600 file, named, not shown."""
        from .auth import AUTH_MODE_ENV, TOKEN_PATH_ENV, private_token_file

        service = self.service(args.backend)
        info = service.get(args.name)
        token = service.auth_token(args.name)
        if not info.endpoints.dashboard:
            raise CommandError(f"{info.name} has no dashboard while {info.phase}")
        lines = [f"# Ray's tools (ray job submit, ray list …) against {info.name}:"]
        if info.backend == "kuberay" and not self.may_connect:
            # This process's port-forward ends with it: the shell needs its own.
            from .backends.kuberay_config import in_cluster

            url = service.backend.dashboard_address(info) if in_cluster() else None
            if url is None:
                lines.append(
                    f"#   first: kubectl -n {info.namespace} port-forward "
                    f"svc/{info.name}-head-svc 8265:8265"
                )
                url = "http://127.0.0.1:8265"
        else:
            url = service.backend.dashboard_address(info)
        lines.append(f"export RAY_ADDRESS={url}")
        if token is None:
            lines.append(f"export {AUTH_MODE_ENV}=disabled")
        else:
            path = private_token_file(f"{info.backend}-{info.namespace or 'local'}-{info.name}",
                                      token)  # fmt: skip
            lines += [f"export {AUTH_MODE_ENV}=token", f"export {TOKEN_PATH_ENV}={path}"]
        text = "\n".join(lines) + "\n"
        self.out.block(text)
        return text

    def do_keep(self, args: argparse.Namespace) -> ClusterInfo:
        info = self.service(args.backend).keep_running(args.name)
        self.out.line(f"Keeping {info.name} running: its idle clock starts again.")
        return info

    do_keep_running = do_keep

    def do_usage(self, args: argparse.Namespace) -> list[Any]:
        from .culler.ledger import usage_rows
        from .culler.ledger_store import store_for

        service = self.service(args.backend)
        everyone = args.all and service.admin
        if args.all and not service.admin:
            raise CommandError("--all shows every user's GPU-hours: for admins only")
        now = time.time()
        since = now - args.since
        intervals = store_for(service.backend).load(None if everyone else self.user)
        rows = usage_rows(intervals, since, now)
        self.out.block(render.usage_table(rows, since, everyone=everyone))
        return rows

    def do_culler(self, args: argparse.Namespace) -> None:
        if self.may_connect:
            raise CommandError(
                "the culler is a service: run `raylab culler` in a shell, a JupyterHub "
                "service or a Deployment (docs/culler.md)"
            )
        from .culler.service_main import run_culler

        run_culler(args, self.settings, self.out.line)

    def do_export(self, args: argparse.Namespace) -> Any:
        from .connect import connected_cluster
        from .export.verb import run_export

        service = self.service(args.backend)
        connected = connected_cluster() if self.may_connect else None
        return run_export(
            args,
            connected_cluster_info=service.get(connected) if connected else None,
            out=self.out,
            settings=self.settings,
            lookup=service.get,
        )

    def do_pip(self, args: argparse.Namespace) -> ClusterInfo | None:
        from .kernel_pip import install_in_kernel, parse_install

        if not self.may_connect:
            raise CommandError(
                "pip installs into a notebook kernel; in Python use `%load_ext raylab` then "
                "`%raycluster pip install PKG`"
            )
        pip_args = parse_install(list(args.packages))
        install_in_kernel(pip_args, self.out.line)
        return self.add_requirements(list(pip_args.index), backend=args.backend)

    def add_requirements(
        self, requirements: list[str], backend: str | None = None
    ) -> ClusterInfo | None:
        """Add index requirements to the connected cluster's environment and reconnect
        with it (local wheels and folders are shipped as local packages anyway)."""
        from .connect import connected_cluster
        from .kernel_packages import requirement_name

        name = connected_cluster()
        if name is None:
            self.out.line("Installed in this kernel; not connected to a cluster, so nothing else.")
            return None
        service = self.service(backend or self._connected_backend)
        info = service.get(name)
        env = info.environment
        new = {requirement_name(r) for r in requirements}
        kept = [r for r in (env.pip if env else ()) if requirement_name(r) not in new]
        options = EnvOptions(pip=(*kept, *requirements, *(env.wheels if env else ())))
        envs = self.environments()
        prepared = envs.prepare(options, info)
        for warning in prepared.warnings:
            self.out.warn(warning)
        self._connect(info, service, prepared, backend or self._connected_backend)
        info = envs.remember(service, info, prepared)
        what = ", ".join(requirements) if requirements else "the new local packages"
        self.out.line(
            f"Added {what} to {name}'s environment and reconnected this kernel "
            "(objects and actors of the previous connection are gone)."
        )
        self._drift()
        return info

    # --- helpers ------------------------------------------------------------------

    def _connect(
        self, info: ClusterInfo, service: ClusterService, prepared: Prepared, backend: str | None
    ) -> None:
        from .connect import connect

        connect(
            info,
            address=service.backend.client_address(info),
            token=service.auth_token(info.name),
            runtime_env=prepared.runtime_env,
            environment=prepared.fingerprint,
            dashboard=service.backend.dashboard_address(info),
        )
        self._connected_backend = backend

    def _say_pip(self, prepared: Prepared) -> None:
        pip = prepared.runtime_env.get("pip")
        if pip:  # Ray Client answers only once the workers' environment is made
            self.out.line(
                f"The cluster installs {len(pip)} pip package{'s' if len(pip) > 1 else ''} "
                "for this kernel's environment (the first time can take minutes)…"
            )

    def _drift(self) -> None:
        from . import drift

        for warning in drift.check(self.cells()):
            self.out.warn(warning)

    def _connected_note(self, info: ClusterInfo) -> str:
        from .connect import connected_address

        env = info.environment
        shipped = render.environment_text(env) if env else ""
        what = f" with {shipped}" if env and shipped != "nothing synced" else ""
        return (
            f"Connected this kernel to {info.name} "
            f"({connected_address() or info.endpoints.client}){what}; use ray.remote as usual."
        )


def _existing(service: ClusterService, name: str | None) -> ClusterInfo | None:
    if name is None:
        return None
    try:
        return service.get(name)
    except (NotFound, SpecError):  # not yours, or not a name: `create` says which
        return None


def _head_up(info: ClusterInfo) -> bool:
    return info.head_ready


def _ready(info: ClusterInfo) -> bool:
    return info.phase == Phase.READY


class _Connecting:
    """Ray Client's connect in a thread of its own, so that `up`'s one wait loop keeps
    following the cluster meanwhile. Ray Client's default context is shared by every
    thread, so the kernel's own thread uses the connection made here. Only the kernel's
    thread prints (a thread's output may land in another cell)."""

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, run: Callable[[], None]) -> None:
        def target() -> None:
            try:
                run()
            except BaseException as exc:  # re-raised in the kernel's thread
                self._error = exc

        self._thread = threading.Thread(target=target, daemon=True, name="raylab-connect")
        self._thread.start()

    def finished(self) -> bool:
        """True once connected; the connect's own error if it failed."""
        if self._thread is None or self._thread.is_alive():
            return False
        if self._error is not None:
            raise self._error
        return True

    def settle(self) -> None:
        """After a failed wait: let a connect in flight end (bounded by Ray Client's own
        timeout) rather than connect the kernel behind the error the user reads."""
        if self._thread is not None:
            self._thread.join(timeout=60)
