"""REST handlers: thin (parse, authorize, call the service, serialize), as jupyter_server's.

Reads come from the server's `ClusterCache`; writes go through `ClusterService`, which
applies ownership and quotas. Every error is JSON `{"error": ..., "detail": ...}`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from functools import partial
from typing import Any, TypeVar

from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..config import Settings
from ..errors import Conflict, NotFound, RaylabError, SpecError
from ..identity import current_user, is_admin, may_see
from ..model import RUNNING_PHASES, ClusterInfo
from ..service import ClusterService, quota_use
from ..serving.apps import HOW_TO_DEPLOY
from ..spec import describe_fields, shown_field, validate_name
from .cache import ClusterCache, cluster_json
from .strict_json import parse_body

AUTH_RESOURCE = "raylab"
# Endpoints beyond the cluster API that this server has; the frontend shows their buttons
# only when listed in the profiles reply (it fetches that reply at start-up anyway).
FEATURES = ("export", "usage", "keep-running", "jobs", "capacity", "gpu-use", "serve-apps")
T = TypeVar("T")


# jupyter_server's own providers: one person's server, whose browser sessions get made-up
# "Anonymous" names. JupyterHub's provider (and any other) names real users.
_SINGLE_USER_PROVIDERS = (IdentityProvider, PasswordIdentityProvider)


def user_groups(handler: Any) -> list[str]:
    """The request's user's groups: on JupyterHub, the hub's model of the user
    (jupyterhub.singleuser's `JupyterHubUser.hub_user`); other identities have none."""
    hub_user = getattr(handler.current_user, "hub_user", None)
    groups = hub_user.get("groups") if isinstance(hub_user, dict) else None
    return [str(g) for g in groups or []]


def owner_name(handler: Any) -> str:
    """Who owns what this request creates and sees.

    On JupyterHub: the hub user. In a plain single-user `jupyter lab`: the same name the
    kernel's magics and the CLI use (the OS user), so that clusters made in a notebook
    show in the sidebar and the other way round.
    """
    if type(handler.identity_provider) in _SINGLE_USER_PROVIDERS:
        return current_user()
    return str(handler.current_user.username)


class RaylabHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def raylab_settings(self) -> Settings:
        settings: Settings = self.settings["raylab_settings"]
        return settings

    @property
    def cache(self) -> ClusterCache:
        cache: ClusterCache = self.settings["raylab_cache"]
        cache.ensure_started()
        return cache

    @property
    def username(self) -> str:
        return owner_name(self)

    @property
    def is_admin(self) -> bool:
        return is_admin(self.raylab_settings, self.username, user_groups(self))

    def service(self) -> ClusterService:
        return ClusterService(
            self.cache.backend,
            self.raylab_settings,
            self.username,
            admin=self.is_admin,
            program="raylab",  # a REST user's hints name the shell command
        )

    def wants_everyone(self) -> bool:
        """`?all=1` (or true) from an admin; anyone else's is ignored, not refused."""
        return self.get_argument("all", "0") in ("1", "true") and self.is_admin

    def listing(self, kind: str, visible: Callable[[ClusterInfo], bool]) -> str:
        """The envelope every listing shares (the REST list, the stream's snapshot): the
        clusters, and whether the backend answers (`available`, `error`)."""
        body = self.cache.list_text(visible)
        status = self.cache.status()
        head = f'"type": "{kind}", ' if kind else ""
        return (
            f'{{{head}"clusters": {body}, "available": {json.dumps(status["available"])}, '
            f'"error": {json.dumps(status["error"])}}}'
        )

    def visible(self, everyone: bool = False) -> Callable[[ClusterInfo], bool]:
        if everyone and self.is_admin:
            return lambda c: True
        user = self.username
        return lambda c: may_see(c, user, admin=False)

    def find(self, name: str, namespace: str | None = None) -> ClusterInfo:
        """A cluster the caller may see, from the cache; others' are simply not found."""
        validate_name(name)
        info = self.cache.get(name, self.scope(name, namespace))
        if info is None or not may_see(info, self.username, self.is_admin):
            raise NotFound(f"no cluster named {name!r}")
        return info

    def scope(self, name: str, namespace: str | None) -> str | None:
        """The namespace of a `namespaces/NS/clusters/NAME` path: admins' only (their
        overview spans users' namespaces); anyone else's is a plain 404, as for a name
        they may not see."""
        if namespace is not None and not self.is_admin:
            raise NotFound(f"no cluster named {name!r}")
        return namespace

    def as_json(self, info: ClusterInfo) -> dict[str, Any]:
        return cluster_json(info, self.cache.home)

    def json_body(self) -> dict[str, Any]:
        """The body as strict JSON (strict_json.py: finite numbers, bounded size and depth,
        each key once), or one SpecError naming the field."""
        return parse_body(self.request.body)

    async def blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Backend calls block (Kubernetes round trips, starting processes): off the loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    def reply(self, body: Any, status: int = 200) -> None:
        self.set_status(status)
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, web.HTTPError):
            body = {"error": exc.log_message or self._reason, "detail": None}
        else:
            body = {"error": "internal error", "detail": "see the Jupyter server log"}
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps(body))

    def _handle_request_exception(self, e: BaseException) -> None:
        from .. import metrics

        status = e.status if isinstance(e, RaylabError) else getattr(e, "status_code", 500)
        metrics.API_ERRORS.labels("rest", str(status)).inc()
        if isinstance(e, RaylabError):
            # A user's or the infrastructure's error: a clear JSON answer, no traceback.
            # The server's log keeps what lay behind an infrastructure error (the
            # Kubernetes or Ray error the backend raised it from).
            if e.status >= 500 and e.__cause__ is not None:
                self.log.warning("raylab: %s (%s: %s)", e.message, type(e.__cause__).__name__,
                                 e.__cause__)  # fmt: skip
            self.set_status(e.status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(e.to_json()))
            return
        super()._handle_request_exception(e)


class NotFoundHandler(RaylabHandler):
    """Any other path under raylab/: a JSON 404, like every raylab answer."""

    async def _missing(self, path: str) -> None:
        raise NotFound(f"no raylab endpoint {path!r}", detail="see the README's REST API")

    get = post = patch = delete = put = web.authenticated(authorized(_missing))


class ClustersHandler(RaylabHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        await self.cache.wait_synced()
        self.set_header("Content-Type", "application/json")
        self.finish(self.listing("", self.visible(self.wants_everyone())))

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body()
        info, created = await self.blocking(self.service().create, body)
        await self.blocking(self.cache.refresh, info.name)
        self.reply({"cluster": self.as_json(info)}, 201 if created else 200)


class ClusterHandler(RaylabHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str, namespace: str | None = None) -> None:
        await self.cache.wait_synced()
        self.reply({"cluster": self.as_json(self.find(name, namespace))})

    @web.authenticated
    @authorized
    async def patch(self, name: str, namespace: str | None = None) -> None:
        ns = self.scope(name, namespace)
        body = self.json_body()
        unknown = sorted(set(body) - {"workers", "suspend"})
        if unknown or not body:
            raise SpecError(shown_field(unknown[0]) if unknown else "body",
                            "PATCH takes workers or suspend")  # fmt: skip
        service = self.service()
        info: ClusterInfo | None = None
        if "suspend" in body:
            if not isinstance(body["suspend"], bool):
                raise SpecError("suspend", "true or false")
            suspend = partial(service.set_suspended, namespace=ns)
            info = await self.blocking(suspend, name, body["suspend"])
        if "workers" in body:
            info = await self.blocking(partial(service.scale, namespace=ns), name, body["workers"])
        assert info is not None
        await self.blocking(self.cache.refresh, name, ns)
        self.reply({"cluster": self.as_json(info)})

    @web.authenticated
    @authorized
    async def delete(self, name: str, namespace: str | None = None) -> None:
        ns = self.scope(name, namespace)
        await self.blocking(partial(self.service().delete, namespace=ns), name)
        await self.blocking(self.cache.refresh, name, ns)
        self.set_status(204)
        self.finish()


class KeepRunningHandler(RaylabHandler):
    """`POST clusters/NAME/keep-running`: restart an idle cluster's clock (its owner or
    an admin), what the warning's Keep running button sends."""

    @web.authenticated
    @authorized
    async def post(self, name: str, namespace: str | None = None) -> None:
        from .. import metrics

        ns = self.scope(name, namespace)
        info = await self.blocking(partial(self.service().keep_running, namespace=ns), name)
        metrics.KEEP_RUNNING.inc()
        await self.blocking(self.cache.refresh, name, ns)
        self.reply({"cluster": self.as_json(info)})


class GpuUseHandler(RaylabHandler):
    """`GET clusters/NAME/gpu-use`: its GPUs' use read now (a card being opened), at most
    once per few seconds per cluster (server/gpu_use.py); every open sidebar gets it too.
    The owner's or an admin's; a 409 for a cluster not running or without GPUs."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        from .gpu_use import GpuUseReads

        await self.cache.wait_synced()
        info = self.find(name)
        reads: GpuUseReads = self.settings["raylab_gpu_use"]
        use = await self.blocking(reads.read, info)
        self.cache.set_cluster_gpu_use(info, use)
        self.reply({"name": name, "gpu_use": use.to_json()})


class ServeAppsHandler(RaylabHandler):
    """`GET clusters/NAME/apps`: its Ray Serve apps read now from its dashboard (name,
    route, status, replicas, the path through this server and the in-cluster URL). The
    owner's or an admin's; a 409 for a cluster not running."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        from .gpu_use import GpuUseReads

        await self.cache.wait_synced()
        info = self.find(name)
        if info.phase not in RUNNING_PHASES or not info.head_ready:
            raise Conflict(
                f"cluster {name!r} is {info.phase}: its Serve apps are read while it runs",
                detail="the card lists them again once the cluster is Ready",
            )
        reads: GpuUseReads = self.settings["raylab_gpu_use"]
        serve = await self.blocking(reads.reader.read_serve, info)
        self.cache.set_cluster_serve(info, serve)
        body: dict[str, Any] = {"name": name, "serve": serve.to_json()}
        if serve.state == "none" or (serve.state == "running" and not serve.apps):
            body["message"] = f"no Serve app is deployed on {name!r}"
            body["detail"] = HOW_TO_DEPLOY
        self.reply(body)


class UsageHandler(RaylabHandler):
    """`GET usage?since=7d[&all=1]`: GPU-hours per user and GPU type, and per cluster."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        from ..spec import parse_since

        seconds = parse_since(self.get_argument("since", "7d"))
        everyone = self.wants_everyone()
        # Every cluster, for the ownership rule: from the cache once it has listed them
        # (not before: every cluster would pass unchecked), else from the backend.
        await self.cache.wait_synced()
        known = self.cache.list(lambda _: True) if self.cache.synced.is_set() else None
        usage = await self.blocking(
            lambda: self.service().usage(seconds, everyone=everyone, clusters=known)
        )
        self.reply(usage.to_json())


class LogsHandler(RaylabHandler):
    @web.authenticated
    @authorized
    async def get(self, name: str, namespace: str | None = None) -> None:
        ns = self.scope(name, namespace)
        tail = self.get_argument("tail", "200")
        if not (tail.isascii() and tail.isdigit()) or not 1 <= int(tail) <= 10_000:
            raise SpecError("tail", "a number of lines from 1 to 10000")
        text = await self.blocking(partial(self.service().logs, namespace=ns), name, int(tail))
        self.reply({"name": name, "logs": text})


class JobsHandler(RaylabHandler):
    """`GET clusters/NAME/jobs`: the cluster's Ray Jobs (its owner's: they hold its token)."""

    @web.authenticated
    @authorized
    async def get(self, name: str, namespace: str | None = None) -> None:
        from ..jobs.api import for_cluster

        await self.cache.wait_synced()
        info = self.find(name, namespace)
        jobs = await self.blocking(lambda: for_cluster(self.service(), info).list())
        self.reply({"name": name, "jobs": [j.to_json() for j in jobs]})


class JobLogsHandler(RaylabHandler):
    """`GET clusters/NAME/jobs/JOB/logs`: a job's whole log (its result's lines left out)."""

    @web.authenticated
    @authorized
    async def get(self, name: str, job: str, namespace: str | None = None) -> None:
        from ..jobs.api import check_name, for_cluster
        from ..jobs.result import is_result_line

        check_name(job)
        await self.cache.wait_synced()
        info = self.find(name, namespace)
        text = await self.blocking(lambda: for_cluster(self.service(), info).logs(job))
        shown = "\n".join(x for x in text.splitlines() if not is_result_line(x))
        self.reply({"name": name, "job": job, "logs": shown})


class ProfilesHandler(RaylabHandler):
    @web.authenticated
    @authorized
    async def get(self) -> None:
        s = self.raylab_settings
        await self.cache.wait_synced()
        body = s.profiles.to_json()
        body["backend"] = s.backend
        body["autoscales"] = self.cache.backend.autoscales  # the dialog offers it only then
        body["quota"] = quota_use(s, self.cache.list(self.visible())).to_json()
        body["user"] = {"name": self.username, "admin": self.is_admin}
        # Where a name alone points (`clusters/NAME`): the backend's namespace, None for
        # local. The overview reaches clusters elsewhere by `namespaces/NS/clusters/NAME`.
        body["namespace"] = self.cache.home
        body["features"] = list(FEATURES)
        # Kueue: which GPU types queue (the dialog then shows what a request would get).
        body["queues"] = {n: s.local_queue(n) for n in s.profiles.gpu_types} if (
            self.cache.backend.may_queue and s.queueing
        ) else {}  # fmt: skip
        body["priority_classes"] = list(s.options.priority_classes) if body["queues"] else []
        # The request's fields as declared once (`spec.ClusterSpec`): the dialog's inputs.
        body["fields"] = describe_fields()
        self.reply(body)


class CapacityHandler(RaylabHandler):
    """`GET capacity?gpus=N&gpu_type=T[&workers=W]`: what such a cluster would get now
    (free, or what waits ahead in its Kueue queue); `{"capacity": null}` where nothing
    queues. Read on demand (the New-cluster dialog), never polled."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        request = {
            k: self.get_argument(k) for k in ("gpus", "gpu_type", "workers")
            if self.get_argument(k, None) not in (None, "")
        }  # fmt: skip
        outlook = await self.blocking(self.service().capacity, request)
        self.reply({"capacity": outlook.to_json() if outlook is not None else None})
