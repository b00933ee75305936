"""The verbs of `%raycluster` and `raylab`: one implementation (`Commands`).

Magics and CLI differ only in how they show things (`Output`) and whether they may
connect the current process to a cluster (a kernel may; a shell command may not).
"""

from __future__ import annotations

import argparse
import os
import shlex
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ..backends import make_backend
from ..config import Settings
from ..display import render
from ..display.widgets import TextProgress
from ..errors import NotFound, RaylabError, SpecError
from ..identity import current_groups, current_user, is_admin
from ..model import ClusterInfo, Phase
from ..server.paths import dashboard_path
from ..service import ClusterService
from ..serving.apps import HOW_TO_DEPLOY
from ..serving.model import ServeApps
from ..startup import EtaView, PhaseClock, PhaseHistory
from ..sync.options import EnvOptions
from .environment import ClusterEnvironments, options_from
from .output import Output
from .parser import CommandError, build_parser, request_from, subparser, unknown_argument

if TYPE_CHECKING:
    from ..backends.base import Backend
    from ..kernel.driver_watch import Lost
    from ..sync import drift
    from ..sync.runtime_env import Prepared


class Commands:
    def __init__(
        self,
        output: Output,
        *,
        prog: str,
        may_connect: bool,
        settings: Settings | None = None,
        user: str | None = None,
        groups: tuple[str, ...] | None = None,
        cells: Callable[[], list[str]] | None = None,
    ) -> None:
        """`user` and `groups`: who runs the verbs (default: this process's user, and
        on JupyterHub the hub's groups of that user)."""
        self.out = output
        self.prog = prog
        self.may_connect = may_connect
        self._settings = settings
        self.user = user or current_user()
        self._groups = groups
        self.parser = build_parser(prog)
        # The notebook's cells so far (IPython's In): what it imports, for drift warnings.
        self.cells = cells or (lambda: [])
        self._connected_backend: str | None = None
        self._stamp_backend: tuple[str, Backend] | None = None  # mark_cell's
        self._lost: tuple[str, str | None] | None = None  # the cluster lost, its backend

    def environments(self) -> ClusterEnvironments:
        return ClusterEnvironments(self.settings)

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.load()
        return self._settings

    def service(self, backend: str | None) -> ClusterService:
        groups = self._groups
        if groups is None:
            groups = current_groups() if self.user == current_user() else ()
        admin = is_admin(self.settings, self.user, groups)
        return ClusterService(
            make_backend(backend or self.settings.backend, self.settings), self.settings,
            self.user, admin=admin, program=self.prog,
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
            raise CommandError(unknown_argument(extra, subparser(self.parser, args.verb)))
        handler: Callable[[argparse.Namespace], Any] = getattr(
            self, f"do_{args.verb.replace('-', '_')}"
        )
        try:
            return handler(args)
        except SpecError as exc:
            raise CommandError(exc.for_command_line()) from None

    # --- verbs --------------------------------------------------------------------

    def do_up(self, args: argparse.Namespace) -> ClusterInfo:
        request = request_from(args)
        service = self.service(args.backend)
        connect = args.connect and self.may_connect
        kernel_side = self._kernel_side() if connect else None
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
        if existing is None:
            # Where a queue decides when it starts, say what it would get before asking.
            outlook = service.capacity(request) if service.backend.may_queue else None
            if outlook is not None and outlook.queue:
                self.out.line(outlook.text())
        started, began = time.time(), time.monotonic()  # shown; timed
        if connect:
            from ..kernel.connect import load_ray_early

            load_ray_early()
        info, created = service.create(
            request, prepared.environment if remember else None, say=self.out.line
        )
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
        if not args.wait:
            self.out.card(info)
            where = f"; {info.reason}" if info.phase == Phase.QUEUED and info.reason else ""
            self.out.line(
                f"{info.name} is {info.phase}{where}. `{self.prog} status {info.name}` follows "
                f"it; `{self.prog} connect {info.name}` waits for it and connects."
            )
            return info
        # The phase, how long it usually takes here, and a line when it takes too long;
        # learnt only from starts this wait saw from their beginning.
        fresh = created and info.created >= started - 2
        shown = self.out.progress(info, started)
        view = EtaView(
            shown,
            PhaseClock(PhaseHistory(), f"{info.backend}/{info.spec.gpu_type}", record=fresh),
            live=not isinstance(shown, TextProgress),
        )
        # One wait: the kernel connects as soon as the head is up, in a thread, while the
        # same loop follows the workers and keeps the card live.
        connecting = _Connecting()

        def done(now: ClusterInfo) -> bool:
            if connect and not connecting.started and now.head_ready:
                self._say_pip(prepared)
                how = (
                    "as a Ray driver"
                    if service.backend.driver_address(now)
                    else "through Ray Client"
                )
                view.update(note=f"Connecting this kernel {how}…")
                connecting.start(lambda: self._connect(now, service, prepared, args.backend))
            return _ready(now) and (not connect or connecting.finished())

        try:
            info = service.wait(info.name, done, max(1.0, timeout - (time.monotonic() - began)),
                                view, wake=connecting.ended)  # fmt: skip
        except Exception:  # not on an interrupt: that returns at once
            connecting.settle()
            raise
        view.stop_clock()
        view.update(info, note="")
        self.out.line(self._connected_note(info) if connect else render.connect_code(info))
        if kernel_side is not None:
            self._client_limits()
            self._drift(kernel_side)
        return info

    def do_down(self, args: argparse.Namespace) -> None:
        from ..kernel.connect import connected_cluster, disconnect

        service = self.service(args.backend)
        info = service.get(args.name)
        if connected_cluster() == args.name:
            disconnect()
        service.delete(args.name)
        self.environments().forget(info)
        self.out.line(f"Deleted {args.name}.")

    def do_list(self, args: argparse.Namespace) -> list[ClusterInfo]:
        service = self.service(args.backend)
        clusters = service.with_gpu_use(service.list(everyone=args.all))
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
        from ..kernel.connect import connected_cluster

        name = args.name or connected_cluster()
        if name is None:
            return self.do_list(argparse.Namespace(backend=args.backend, all=False))
        service = self.service(args.backend)
        info = service.with_gpu_use([service.get(name)])[0]
        if info.head_ready:
            info = replace(info, serve=service.serve_apps(info))  # the card's Serve row
        self.out.card(info, _GpuUseEvery(lambda: service.get(name), service.with_gpu_use))
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
        kernel_side = self._kernel_side()
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
        self._client_limits()
        self._drift(kernel_side)
        return info

    def do_disconnect(self, args: argparse.Namespace) -> None:
        from ..kernel.connect import disconnect

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
        lost, self._lost = self._lost, None
        if lost is not None and lost[0] == info.name and self.may_connect:
            # This kernel drove it when it was suspended: it drives it again.
            backend = args.backend or lost[1]
            self.run_line(f"connect {info.name}" + (f" --backend {backend}" if backend else ""))
            return info
        self.out.card(info)
        return info

    def lost_line(self, lost: Lost) -> str:
        """The one line a kernel prints when the cluster it drove went away: why, and
        what to type (for a suspension: `resume NAME`, which reconnects this kernel)."""
        self._lost = (lost.cluster, self._connected_backend)
        try:
            info = self.service(self._connected_backend).get(lost.cluster)
        except RaylabError:
            return lost.message(self.prog)
        if info.phase != Phase.SUSPENDED:
            return lost.message(self.prog)
        stopped = " and the cell waiting on it was stopped" if lost.interrupted else ""
        why = info.reason if info.reason.startswith("suspended") else "suspended"
        return (
            f"Cluster {lost.cluster} was {why}, so this kernel is disconnected from it"
            f"{stopped}. Your variables are kept; the cluster's objects and actors are gone. "
            f"`{self.prog} resume {lost.cluster}` starts it again and reconnects this kernel."
        )

    def do_capacity(self, args: argparse.Namespace) -> Any:
        request = {f: getattr(args, f) for f in ("gpus", "gpu_type") if getattr(args, f)}
        service = self.service(args.backend)
        outlook = service.capacity(request)
        if outlook is None:
            self.out.line(
                f"The {service.backend.name} backend has no queue: a cluster starts as soon "
                "as there is room, within your quota."
            )
        else:
            self.out.line(outlook.text())
        quota = service.quota()
        self.out.line(
            f"Your quota: {quota.gpus_left} of {quota.max_gpus_per_user} GPUs and "
            f"{quota.clusters_left} of {quota.max_clusters_per_user} clusters left."
        )
        return outlook

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
            url = f"{prefix.rstrip('/')}/{dashboard_path(info.name)}"
        else:
            url = service.backend.dashboard_address(info) or info.endpoints.dashboard
        self.out.link(url, f"Ray dashboard of {info.name}")
        if not prefix and service.auth_token_in_use(info.name):
            self.out.line(
                "It asks for the cluster's Ray token: open it from JupyterLab's Ray clusters "
                f"sidebar instead (no token needed), or see `{self.prog} env {info.name}`."
            )
        return url

    def do_serve(self, args: argparse.Namespace) -> ServeApps:
        from ..display.serve_table import serve_table
        from ..kernel.connect import connected_cluster
        from ..kernel.jupyter_url import jupyter_base_url

        name = args.name or connected_cluster()
        if name is None:
            raise CommandError(f"name a cluster: `{self.prog} serve NAME` (none is connected)")
        service = self.service(args.backend)
        info = service.get(name)
        serve = service.serve_apps(info)
        if serve.state == "unknown":
            self.out.line(f"The Serve apps of {name} cannot be read: {serve.why}.")
        elif not serve.apps:
            why = f" ({serve.why})" if serve.why else ""
            self.out.line(f"No Serve app is deployed on {name}{why}: {HOW_TO_DEPLOY}.")
        else:
            self.out.block(serve_table(serve, jupyter_base_url() if self.may_connect else ""))
        return serve

    def do_env(self, args: argparse.Namespace) -> str:
        """`export` lines for a shell; the token stays in a 0600 file, named, not shown."""
        from ..auth import AUTH_MODE_ENV, TOKEN_PATH_ENV, private_token_file

        service = self.service(args.backend)
        info = service.get(args.name)
        token = service.auth_token(args.name)
        if not info.endpoints.dashboard:
            raise CommandError(f"{info.name} has no dashboard while {info.phase}")
        lines = [f"# Ray's tools (ray job submit, ray list …) against {info.name}:"]
        if self.may_connect:
            url = service.backend.dashboard_address(info)
        else:  # a tunnel of this process ends with it: the shell then needs its own
            url = service.backend.lasting_dashboard_address(info)
            if url is None:
                lines.append(
                    f"#   first: kubectl -n {info.namespace} port-forward "
                    f"svc/{info.name}-head-svc 8265:8265"
                )
                url = "http://127.0.0.1:8265"
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
        service = self.service(args.backend)
        if args.all and not service.admin:
            raise CommandError("--all shows every user's GPU-hours: for admins only")
        usage = service.usage(args.since, everyone=args.all)
        self.out.block(render.usage_table(usage.users, usage.since, everyone=args.all))
        return usage.users

    def do_culler(self, args: argparse.Namespace) -> None:
        if self.may_connect:
            raise CommandError(
                "the culler is a service: run `raylab culler` in a shell, a JupyterHub "
                "service or a Deployment (docs/culler.md)"
            )
        from ..culler.service_main import run_culler

        run_culler(args, self.settings, self.out.line)

    def do_export(self, args: argparse.Namespace) -> Any:
        from ..export.verb import run_export
        from ..kernel.connect import connected_cluster

        service = self.service(args.backend)
        connected = connected_cluster() if self.may_connect else None
        return run_export(
            args,
            connected_cluster_info=service.get(connected) if connected else None,
            out=self.out,
            settings=self.settings,
            lookup=service.get,
        )

    def do_job(self, args: argparse.Namespace) -> Any:
        from .jobs import JobVerbs

        return JobVerbs(self).job(args)

    def do_jobs(self, args: argparse.Namespace) -> Any:
        from .jobs import JobVerbs

        return JobVerbs(self).jobs(args)

    def submit_job(self, line: str, cell: str, earlier: list[str], number: int | None) -> Any:
        """`%%raycluster job LINE` over `cell`; `earlier`: the cells run before it."""
        from .jobs import JobVerbs

        try:
            return JobVerbs(self).submit(line, cell, earlier, number)
        except SpecError as exc:
            raise CommandError(exc.for_command_line()) from None

    def do_pip(self, args: argparse.Namespace) -> ClusterInfo | None:
        from ..sync.pip import install_in_kernel, parse_install

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
        from ..kernel.connect import connected_cluster
        from ..sync.packages import requirement_name

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
        kernel_side = self._kernel_side()
        for warning in prepared.warnings:
            self.out.warn(warning)
        self._connect(info, service, prepared, backend or self._connected_backend)
        info = envs.remember(service, info, prepared)
        what = ", ".join(requirements) if requirements else "the new local packages"
        self.out.line(
            f"Added {what} to {name}'s environment and reconnected this kernel "
            "(objects and actors of the previous connection are gone)."
        )
        self._drift(kernel_side)
        return info

    # --- helpers ------------------------------------------------------------------

    def _connect(
        self, info: ClusterInfo, service: ClusterService, prepared: Prepared, backend: str | None
    ) -> None:
        from ..kernel.connect import connect
        from ..sync.kv_values import for_pod_workers

        runtime_env, then = prepared.runtime_env, None
        if service.backend.workers_read_owner_files:
            runtime_env = self.environments().values.for_local_workers(info, runtime_env)
        else:  # workers in pods: from the cluster's internal KV, put once connected
            runtime_env, then = for_pod_workers(runtime_env)
        connect(
            info,
            address=service.backend.client_address(info),
            token=service.auth_token(info.name),
            runtime_env=runtime_env,
            environment=prepared.fingerprint,
            dashboard=service.backend.dashboard_address(info),
            driver=service.backend.driver_address(info),
            join=service.backend.driver_joins,
            then=then,
        )
        self._connected_backend = backend

    def mark_cell(self, cluster: str, at: float) -> None:
        """Stamp `cluster`, which this kernel drives, with a running cell (called from a
        background thread: kernel/cell_stamps.py)."""
        which = self._connected_backend or self.settings.backend
        if self._stamp_backend is None or self._stamp_backend[0] != which:
            self._stamp_backend = (which, make_backend(which, self.settings))  # made once
        self._stamp_backend[1].mark_cell(cluster, at)

    def _say_pip(self, prepared: Prepared) -> None:
        pip = prepared.runtime_env.get("pip")
        if pip:  # Ray Client answers only once the workers' environment is made
            self.out.line(
                f"The cluster installs {len(pip)} pip package{'s' if len(pip) > 1 else ''} "
                "for this kernel's environment (the first time can take minutes)…"
            )

    def _kernel_side(self) -> drift.KernelSide:
        from ..sync import drift

        return drift.KernelSide(self.cells())

    def _drift(self, kernel_side: drift.KernelSide) -> None:
        from ..kernel import warm_workers
        from ..sync import drift

        with warm_workers.own_work():  # its task is not the user's work starting
            warnings = drift.check(kernel_side)
        for warning in warnings:
            self.out.warn(warning)

    def _client_limits(self) -> None:
        """Once per kernel: what a Ray Client connection cannot do, and the way round."""
        from ..kernel import connect

        global _client_limits_said
        if connect.connected_mode() != connect.CLIENT or _client_limits_said:
            return
        _client_limits_said = True
        where = (
            "this kernel could not join the cluster as a Ray node"
            if connect.why_client()
            else "this kernel is outside the cluster's network"
        )
        self.out.warn(
            f"{where}, so it drives the cluster "
            "through Ray Client: Ray Data does not work through it, and each call and "
            "object costs more than in a driver; run the notebook where the cluster's "
            f"pods can reach it, or submit long runs as Ray jobs (`{self.prog} env "
            "NAME` gives `ray job submit` the cluster's address and token)"
        )

    def _connected_note(self, info: ClusterInfo) -> str:
        from ..kernel.connect import DRIVER, connected_address, connected_mode, why_client

        env = info.environment
        shipped = render.environment_text(env) if env else ""
        what = f" with {shipped}" if env and shipped != "nothing synced" else ""
        where = connected_address() or info.endpoints.client
        if connected_mode() == DRIVER:
            how = f"as a Ray driver ({where}, on the cluster's network)"
        elif why_client():
            how = f"({where}) through Ray Client, not as a Ray driver: {why_client()}"
        else:
            how = f"({where}) through Ray Client"
        return f"Connected this kernel to {info.name} {how}{what}; use ray.remote as usual."


_client_limits_said = False  # per kernel process


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
        self._done = False
        self.ended = threading.Event()  # wakes the wait loop: no poll's delay after it

    @property
    def started(self) -> bool:
        return self._thread is not None

    def start(self, run: Callable[[], None]) -> None:
        def target() -> None:
            try:
                run()
            except BaseException as exc:  # re-raised in the kernel's thread
                self._error = exc
            finally:
                self._done = True  # before the thread has ended: finished() may not wait
                self.ended.set()

        self._thread = threading.Thread(target=target, daemon=True, name="raylab-connect")
        self._thread.start()

    def finished(self) -> bool:
        """True once connected; the connect's own error if it failed."""
        if not self._done:
            return False
        if self._error is not None:
            raise self._error
        return True

    def settle(self) -> None:
        """After a failed wait: let a connect in flight end (bounded by Ray Client's own
        timeout) rather than connect the kernel behind the error the user reads."""
        if self._thread is not None:
            self._thread.join(timeout=60)


class _GpuUseEvery:
    """A live card's reads: the cluster every time, its GPU use every `every_s` (a card
    left open must not query the dashboard every two seconds for half an hour)."""

    def __init__(
        self,
        fetch: Callable[[], ClusterInfo],
        read_use: Callable[[list[ClusterInfo]], list[ClusterInfo]],
        every_s: float = 15.0,
    ) -> None:
        self.fetch, self.read_use, self.every_s = fetch, read_use, every_s
        self._last: ClusterInfo | None = None
        self._read_at = float("-inf")

    def __call__(self) -> ClusterInfo:
        info = self.fetch()
        if time.monotonic() - self._read_at >= self.every_s:
            self._read_at = time.monotonic()
            info = self.read_use([info])[0]
        elif self._last is not None and self._last.uid == info.uid:
            info = replace(info, gpu_use=self._last.gpu_use)
        self._last = info
        return info
