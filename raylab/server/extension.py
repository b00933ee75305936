"""The Jupyter server extension: settings, one cache (watch) per server, the routes."""

from __future__ import annotations

from typing import Any

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.utils import url_path_join

from ..backends import make_backend
from ..config import Raylab, Settings
from ..culler.activity import ActivityReader
from ..culler.gpu_use import UseHistory
from ..culler.sweep import busy_percent
from ..identity import current_groups, current_user, is_admin
from . import upstream_client
from .cache import ClusterCache
from .culling import ServerCuller
from .dashboard import DashboardKeyHandler, DashboardProxyHandler
from .dashboard_keys import MARK, DashboardKeys
from .events import EventsHandler
from .export import ExportHandler
from .gpu_use import GpuUseReads
from .handlers import (
    CapacityHandler,
    ClusterHandler,
    ClustersHandler,
    GpuUseHandler,
    JobLogsHandler,
    JobsHandler,
    KeepRunningHandler,
    LogsHandler,
    NotFoundHandler,
    ProfilesHandler,
    ServeAppsHandler,
    UsageHandler,
)
from .paths import PREFIX
from .serve_proxy import ServeKeyHandler, ServeProxyHandler
from .standby import ServerStandby

# Any segment: the handlers validate it, so a bad name gets a 422 that says why.
NAME = r"(?P<name>[^/]+)"
# An admin's path to a cluster in another user's namespace (the overview across them).
IN_NAMESPACE = url_path_join("namespaces", r"(?P<namespace>[^/]+)", "clusters", NAME)
# Under <base_url>raylab/.
ROUTES: list[tuple[str, Any]] = [
    ("profiles", ProfilesHandler),
    ("clusters", ClustersHandler),
    ("events", EventsHandler),
    ("export", ExportHandler),
    ("usage", UsageHandler),
    ("capacity", CapacityHandler),
    (url_path_join("clusters", NAME), ClusterHandler),
    (url_path_join("clusters", NAME, "logs"), LogsHandler),
    (url_path_join("clusters", NAME, "keep-running"), KeepRunningHandler),
    # The home namespace's only: a cluster's token is read there (as the dashboard's).
    (url_path_join("clusters", NAME, "gpu-use"), GpuUseHandler),
    (url_path_join("clusters", NAME, "jobs"), JobsHandler),
    (url_path_join("clusters", NAME, "jobs", r"(?P<job>[^/]+)", "logs"), JobLogsHandler),
    (IN_NAMESPACE, ClusterHandler),
    (url_path_join(IN_NAMESPACE, "logs"), LogsHandler),
    (url_path_join(IN_NAMESPACE, "keep-running"), KeepRunningHandler),
    # Before the plain route, which would take `~KEY/...` as a path of Ray's.
    (
        url_path_join("clusters", NAME, "dashboard", MARK + r"(?P<key>[\w-]+)") + r"/?(?P<path>.*)",
        DashboardKeyHandler,
    ),
    (url_path_join("clusters", NAME, "dashboard") + r"/?(?P<path>.*)", DashboardProxyHandler),
    # Ray Serve apps, the owner's (serve_proxy.py): the same rules as the dashboard's.
    (url_path_join("clusters", NAME, "apps"), ServeAppsHandler),
    (
        url_path_join("clusters", NAME, "serve", MARK + r"(?P<key>[\w-]+)") + r"/?(?P<path>.*)",
        ServeKeyHandler,
    ),
    (url_path_join("clusters", NAME, "serve") + r"/?(?P<path>.*)", ServeProxyHandler),
    (r"(?P<path>.*)", NotFoundHandler),
]


class RaylabExtension(ExtensionApp):
    name = "raylab"
    load_other_extensions = True
    classes = [Raylab]  # noqa: RUF012 (declared by ExtensionApp)

    cache: ClusterCache | None = None
    server_culler: ServerCuller | None = None
    standby: ServerStandby | None = None

    def initialize_handlers(self) -> None:
        assert self.serverapp is not None  # set by jupyter_server before this is called
        settings = Settings.from_config(self.serverapp.config)
        # An admin's server also watches the namespaces named for the overview. The hub is
        # asked for the user's groups (admin_groups) only when that is configured.
        watch: list[str] = []
        if settings.options.admin_watch_namespaces:
            user = current_user()
            if is_admin(settings, user) or is_admin(settings, user, current_groups()):
                watch = settings.options.admin_watch_namespaces
        backend = make_backend(settings.backend, settings, watch_namespaces=watch)
        self.cache = ClusterCache(backend, self.log)
        from .. import metrics

        cache = self.cache
        # This server's /metrics (jupyter_server serves the default registry).
        metrics.set_cluster_source("server", lambda: list(cache.clusters.values()))
        if settings.options.culler == "server":
            self.server_culler = ServerCuller(cache, settings, self.log)
        if settings.options.standby:
            self.standby = ServerStandby(backend, settings, self.log)
        web_app: Any = self.serverapp.web_app
        web_app.settings["raylab_gpu_use"] = self._gpu_use_reads(settings)
        web_app.settings["raylab_settings"] = settings
        web_app.settings["raylab_cache"] = self.cache
        web_app.settings["raylab_dashboard_keys"] = DashboardKeys()
        base = url_path_join(web_app.settings["base_url"], PREFIX)
        web_app.add_handlers(".*$", [(url_path_join(base, p), h) for p, h in ROUTES])
        self.log.info("raylab: serving %s (backend %s)", base, settings.backend)

    def _gpu_use_reads(self, settings: Settings) -> GpuUseReads:
        """Cards' reads share the culler's tokens and its line of the last hour."""
        assert self.cache is not None
        culler = self.server_culler.culler if self.server_culler is not None else None
        if culler is not None:
            reader, history = culler.reader, culler.history
        else:
            o = settings.options
            reader = ActivityReader(self.cache.backend, 3.0, o.culler_dashboard_url)
            history = UseHistory()
        return GpuUseReads(reader, history, busy_percent(settings))

    async def _start_jupyter_server_extension(self, serverapp: Any) -> None:
        # The cache starts on the first request; the culler needs it from the start.
        if self.server_culler is not None and self.cache is not None:
            self.cache.ensure_started()
            self.server_culler.start()
        if self.standby is not None and not self.standby.off:
            self.standby.start()

    async def stop_extension(self) -> None:
        # The watch stops with the server; the clusters themselves keep running.
        if self.server_culler is not None:
            await self.server_culler.stop()
        if self.standby is not None and not self.standby.off:
            await self.standby.stop()  # a standby lives no longer than its server
        if self.cache is not None:
            self.cache.stop()
        await upstream_client.close()
