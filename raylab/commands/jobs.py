"""The job verbs: `%%raycluster job` (a cell becomes a Ray Job) and `jobs`, `job logs`,
`job stop`, `job result`. Thin over jobs/: the script, the result and the job API."""

from __future__ import annotations

import argparse
import math
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import NotFound
from ..jobs.api import Job, JobsApi, check_name, for_cluster
from ..jobs.errors import JobError
from ..jobs.result import is_result_line, read_result
from ..jobs.script import build
from ..jobs.value import JobValue
from ..model import ClusterInfo
from .output import Output
from .parser import CommandError, Parser, unknown_argument

if TYPE_CHECKING:
    from ..service import ClusterService

_SUPERVISOR_LINE = "Running entrypoint for job "


def cell_parser(prog: str) -> argparse.ArgumentParser:
    parser = Parser(prog=f"%{prog} job", allow_abbrev=False,
                    description="Run this cell as a Ray Job on the cluster.")  # fmt: skip
    parser.add_argument("name", metavar="NAME", nargs="?", help="default: cellN-xxxx")
    parser.add_argument("--cluster", help="default: the connected cluster")
    parser.add_argument("--gpus", help="GPUs for the job's own driver (default 0)")
    parser.add_argument("--cpus", help="CPUs for the job's own driver (default Ray's)")
    parser.add_argument("--backend", help="default: the configured one")
    return parser


class VerbHost(Protocol):
    """What the job verbs use of the line verbs (`Commands`)."""

    prog: str
    may_connect: bool
    user: str
    out: Output

    def service(self, backend: str | None) -> ClusterService: ...
    def run(self, argv: list[str]) -> Any: ...


class JobVerbs:
    def __init__(self, commands: VerbHost) -> None:
        self.c = commands

    # --- %%raycluster job -----------------------------------------------------------

    def submit(self, line: str, cell: str, earlier: list[str], number: int | None) -> Any:
        import shlex

        parser = cell_parser(self.c.prog.lstrip("%"))
        try:
            args, extra = parser.parse_known_args(shlex.split(line))
        except ValueError as exc:
            raise CommandError(f"cannot parse the line: {exc}") from None
        if extra:
            raise CommandError(unknown_argument(extra, parser))
        if not self.c.may_connect:
            raise CommandError("a job is made from a notebook cell: `%%raycluster job`")
        gpus, cpus = _amount("gpus", args.gpus), _amount("cpus", args.cpus)
        name = args.name or f"cell{number or 0}-{secrets.token_hex(2)}"
        check_name(name)
        nonce = secrets.token_hex(8)
        label = _label(number, name)
        script = build(cell, earlier, nonce, label)  # refuses before anything is sent
        service, info = self._cluster(args.cluster, args.backend)
        runtime_env = self._environment(info, args.backend)
        api = self._api(service, info)
        if api.exists(name):
            raise JobError(
                f"cluster {info.name!r} has a job named {name} already",
                detail=f"choose another name, or `{self.c.prog} job logs {name}`",
            )
        metadata = {"raylab": "1", "raylab_nonce": nonce, "raylab_cell": label,
                    "raylab_user": self.c.user}  # fmt: skip
        module = f"raylab_job_{nonce}"
        with tempfile.TemporaryDirectory(prefix="raylab-job-") as folder:
            package = Path(folder) / module
            package.mkdir()
            (package / "__init__.py").write_text("")
            (package / "__main__.py").write_text(script.source)
            env = dict(runtime_env or {})
            env["py_modules"] = [*env.get("py_modules", ()), str(package)]
            api.submit(name, f"python -m {module}", env, metadata, gpus, cpus)
        brought = f" with {', '.join(script.brought)} from earlier cells" if script.brought else ""
        self.c.out.line(
            f"Job {name} runs on {info.name}{brought}; interrupting this cell stops only "
            f"the output (`{self.c.prog} job logs {name} --follow` picks it up again)."
        )
        return self._stream(api, name, want_result=script.returns)

    # --- line verbs -------------------------------------------------------------------

    def job(self, args: argparse.Namespace) -> Any:
        check_name(args.name)
        api = self._find(args.name, args.cluster, args.backend)
        if args.action == "logs":
            if args.follow:
                return self._stream(api, args.name, want_result=False)
            text = "\n".join(x for x in api.logs(args.name).splitlines() if not is_result_line(x))
            self.c.out.block(text)
            return text
        if args.action == "stop":
            job = api.get(args.name)
            if job.finished:
                self.c.out.line(f"Job {job.name} had ended already ({job.status}).")
            elif api.stop(args.name):
                self.c.out.line(f"Stopping job {args.name} on {api.cluster}.")
            return None
        return JobValue(self._result(api, api.get(args.name)))

    def jobs(self, args: argparse.Namespace) -> list[Job]:
        from ..kernel.connect import connected_cluster

        name = args.cluster or connected_cluster()
        service = self.c.service(args.backend)
        clusters = [service.get(name)] if name else [i for i in service.list() if i.head_ready]
        found: list[Job] = []
        for info in clusters:
            if info.head_ready:
                found += self._api(service, info).list()
        self.c.out.block(_table(found) if found else "No jobs on " + (
            f"{name}." if name else "your running clusters."))  # fmt: skip
        return found

    # --- helpers ----------------------------------------------------------------------

    def _stream(self, api: JobsApi, name: str, want_result: bool) -> Any:
        lines = api.follow(name)  # a generator: closed on an interrupt
        try:
            for line in lines:
                if not (is_result_line(line) or line.startswith(_SUPERVISOR_LINE)):
                    self.c.out.line(line)
        except KeyboardInterrupt:
            lines.close()
            self.c.out.line(
                f"Stopped showing job {name}'s output; it goes on on {api.cluster} "
                f"(`{self.c.prog} job logs {name} --follow`, `{self.c.prog} job stop {name}`)."
            )
            return None
        job = api.get(name)
        if job.status == "SUCCEEDED":
            return JobValue(self._result(api, job)) if want_result else None
        if job.status == "STOPPED":
            self.c.out.line(f"Job {name} was stopped.")
            return None
        raise JobError(f"job {name} {job.status.lower()}: {_first(job.message)}",
                       detail=f"its log above; `{self.c.prog} job logs {name}`")  # fmt: skip

    def _result(self, api: JobsApi, job: Job) -> Any:
        if not job.nonce:
            raise JobError(f"job {job.name} was not made from a cell; it has no result")
        if not job.finished:
            raise JobError(
                f"job {job.name} is {job.status.lower()}; its result comes when it ends",
                detail=f"`{self.c.prog} job logs {job.name} --follow` waits for it",
            )
        if job.status != "SUCCEEDED":
            raise JobError(f"job {job.name} {job.status.lower()}: {_first(job.message)}")
        return read_result(api.logs(job.name), job.nonce, job.name)

    def _cluster(self, name: str | None, backend: str | None) -> tuple[Any, ClusterInfo]:
        from ..kernel.connect import connected_cluster

        name = name or connected_cluster()
        if name is None:
            raise CommandError(
                "no cluster for the job: connect first (`%raycluster up`) or give --cluster NAME"
            )
        service = self.c.service(backend)
        return service, service.get(name)

    def _environment(self, info: ClusterInfo, backend: str | None) -> dict[str, Any] | None:
        """The environment of this kernel's connection to the cluster (connecting first
        if it is not the connected one): the job ships what the kernel's workers get."""
        from ..kernel.connect import connected_cluster, connected_runtime_env

        if connected_cluster() != info.name:
            argv = ["connect", info.name] + (["--backend", backend] if backend else [])
            self.c.run(argv)
        return connected_runtime_env()

    def _api(self, service: Any, info: ClusterInfo) -> JobsApi:
        return for_cluster(service, info)

    def _find(self, name: str, cluster: str | None, backend: str | None) -> JobsApi:
        from ..kernel.connect import connected_cluster

        service = self.c.service(backend)
        where = cluster or connected_cluster()
        clusters = [service.get(where)] if where else [i for i in service.list() if i.head_ready]
        for info in clusters:
            api = self._api(service, info)
            if api.exists(name):
                return api
        names = ", ".join(i.name for i in clusters) or "none running"
        raise NotFound(f"no job {name} on {names}", detail=f"`{self.c.prog} jobs` lists them")


def _amount(field: str, text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise CommandError(f"--{field}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0 or value > 4096:
        raise CommandError(f"--{field}: {text} is out of range; use 0 to 4096")
    return value


def _label(number: int | None, name: str) -> str:
    notebook = os.path.basename(os.environ.get("JPY_SESSION_NAME", "")) or "notebook"
    return f"<job {name}: {notebook}, In [{number}]>" if number else f"<job {name}>"


def _first(text: str) -> str:
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else "no message"


def _table(jobs: list[Job]) -> str:
    rows = [("NAME", "CLUSTER", "STATE", "STARTED", "DURATION", "CELL")]
    now = time.time()
    for j in jobs:
        started = time.strftime("%Y-%m-%d %H:%M", time.localtime(j.started)) if j.started else "-"
        took = ((j.ended or now) - j.started) if j.started else None
        rows.append((j.name, j.cluster, j.status, started, _duration(took), _cell(j.cell)))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
                     for r in rows) + "\n"  # fmt: skip


def _cell(label: str) -> str:
    return label.split(": ", 1)[1].rstrip(">") if ": " in label else ""


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes = int(seconds // 60)
    if minutes >= 60:
        return f"{minutes // 60}h{minutes % 60:02d}m"
    return f"{minutes}m{int(seconds) % 60:02d}s"
