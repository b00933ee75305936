"""One cluster's Ray Jobs, through its dashboard's job API with the cluster's token.

Ray's own `JobSubmissionClient` does the work (it uploads the working dir and packages
content-addressed, so an unchanged folder is not sent twice); this adds the token, the
streaming of a job's log into a kernel that stays interruptible, and messages that name
the cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import re
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..auth import bearer
from ..errors import BackendUnavailable, NotFound
from .errors import JobError

if TYPE_CHECKING:
    from ..model import ClusterInfo
    from ..service import ClusterService

TERMINAL = frozenset({"SUCCEEDED", "FAILED", "STOPPED"})
# Ray accepts any submission id; ours are names a user types and a URL carries.
JOB_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
META = "raylab"  # metadata keys of a job made by raylab start with this


@dataclass(frozen=True)
class Job:
    name: str  # the submission id
    cluster: str
    status: str  # PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED
    started: float | None  # epoch seconds
    ended: float | None
    message: str
    metadata: dict[str, str]

    @property
    def cell(self) -> str:
        return self.metadata.get(f"{META}_cell", "")

    @property
    def nonce(self) -> str:
        return self.metadata.get(f"{META}_nonce", "")

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cluster": self.cluster, "status": self.status,
                "started": self.started, "ended": self.ended, "message": self.message,
                "cell": self.cell}  # fmt: skip


class JobsApi:
    def __init__(self, cluster: str, dashboard: str, token: str | None) -> None:
        from ray.job_submission import JobSubmissionClient

        self.cluster = cluster
        headers = {"Authorization": bearer(token)} if token else {}
        try:
            self.client = JobSubmissionClient(dashboard, headers=headers)
        except (ConnectionError, RuntimeError) as exc:
            raise BackendUnavailable(
                f"cannot reach the job API of cluster {cluster!r} at {dashboard}: "
                f"{_first_line(exc)}",
                detail=f"`%raycluster status {cluster}` shows the cluster's state",
            ) from None

    def submit(
        self, name: str, entrypoint: str, runtime_env: dict[str, Any] | None,
        metadata: dict[str, str], gpus: float | None = None, cpus: float | None = None,
    ) -> str:  # fmt: skip
        try:
            with _quiet_sdk():
                submitted = self.client.submit_job(
                    entrypoint=entrypoint, submission_id=name, runtime_env=runtime_env,
                    metadata=metadata, entrypoint_num_gpus=gpus, entrypoint_num_cpus=cpus,
                )  # fmt: skip
            return str(submitted)
        except RuntimeError as exc:
            raise JobError(
                f"cluster {self.cluster!r} refused job {name}: {_first_line(exc)}"
            ) from None

    def get(self, name: str) -> Job:
        try:
            details = self.client.get_job_info(name)
        except RuntimeError as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                raise NotFound(
                    f"no job {name} on cluster {self.cluster!r}",
                    detail="`%raycluster jobs` lists them",
                ) from None
            raise self._unavailable(exc) from None
        return self._job(details)

    def exists(self, name: str) -> bool:
        try:
            self.get(name)
        except NotFound:
            return False
        return True

    def list(self) -> list[Job]:
        try:
            jobs = [self._job(d) for d in self.client.list_jobs() if d.submission_id]
        except RuntimeError as exc:
            raise self._unavailable(exc) from None
        return sorted(jobs, key=lambda j: j.started or 0.0)

    def logs(self, name: str) -> str:
        self.get(name)  # NotFound says so in one line
        try:
            return str(self.client.get_job_logs(name))
        except RuntimeError as exc:
            raise self._unavailable(exc) from None

    def stop(self, name: str) -> bool:
        self.get(name)
        try:
            return bool(self.client.stop_job(name))
        except RuntimeError as exc:
            raise self._unavailable(exc) from None

    def follow(self, name: str) -> Generator[str, None, None]:
        """The job's log line by line, from its start until it ends. Closing the
        iterator (an interrupt in the kernel) stops reading; the job goes on."""
        lines: queue.Queue[str | BaseException | None] = queue.Queue()
        loop = asyncio.new_event_loop()
        task: list[asyncio.Task[None]] = []

        async def tail() -> None:
            partial = ""
            async for chunk in self.client.tail_job_logs(name):
                partial += chunk
                *done, partial = partial.split("\n")
                for line in done:
                    lines.put(line)
            if partial:
                lines.put(partial)

        def run() -> None:
            task.append(loop.create_task(tail()))
            try:
                with _quiet_sdk():
                    loop.run_until_complete(task[0])
                lines.put(None)
            except asyncio.CancelledError:
                lines.put(None)
            except BaseException as exc:  # handed to the reader, who says what it was
                lines.put(exc)
            finally:
                loop.close()

        # The kernel's own event loop runs the cell: the websocket gets a loop and a
        # thread of its own, and the cell only waits on a queue (interruptible).
        reader = threading.Thread(target=run, name=f"raylab-job-{name}", daemon=True)
        reader.start()
        try:
            while True:
                try:
                    item = lines.get(timeout=0.2)
                except queue.Empty:
                    continue
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise self._unavailable(item)
                yield item
        finally:
            if task and not task[0].done():
                loop.call_soon_threadsafe(task[0].cancel)

    def _job(self, details: Any) -> Job:
        def seconds(ms: int | None) -> float | None:
            return ms / 1000.0 if ms else None

        status = getattr(details.status, "value", details.status)
        return Job(
            name=str(details.submission_id), cluster=self.cluster, status=str(status),
            started=seconds(details.start_time), ended=seconds(details.end_time),
            message=str(details.message or ""), metadata=dict(details.metadata or {}),
        )  # fmt: skip

    def _unavailable(self, exc: BaseException) -> BackendUnavailable:
        return BackendUnavailable(
            f"the job API of cluster {self.cluster!r} failed: {_first_line(exc)}",
            detail=f"`%raycluster status {self.cluster}` shows the cluster's state",
        )


def check_name(name: str) -> None:
    if not JOB_NAME.fullmatch(name):
        shown = ascii(name) if len(name) <= 40 else ascii(name[:37] + "...")
        raise JobError(
            f"{shown} is not a job name; use up to 63 letters, digits, '.', '_' and '-', "
            "starting with a letter or digit"
        )


def for_cluster(service: ClusterService, info: ClusterInfo) -> JobsApi:
    """The job API of one of the caller's clusters (its owner's token: jobs run as them)."""
    dashboard = service.backend.dashboard_address(info) or info.endpoints.dashboard
    if not dashboard or not info.head_ready:
        raise JobError(f"cluster {info.name!r} runs no jobs while {info.phase}")
    return JobsApi(info.name, dashboard, service.auth_token(info.name))


@contextlib.contextmanager
def _quiet_sdk() -> Iterator[None]:
    """Ray's SDK logs each package it uploads or finds uploaded, and the closing of a log
    stream (INFO, in red in a notebook); raylab's own lines say what happened."""
    names = ("dashboard_sdk", "job.sdk")
    loggers = [logging.getLogger(f"ray.dashboard.modules.{n}") for n in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
