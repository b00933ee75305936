"""REST handlers: thin (parse, authorize, call, serialize), as jupyter_server's own."""

from __future__ import annotations

import json

from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import APIHandler
from tornado import web

from ..config import Settings

AUTH_RESOURCE = "raylab"


class RaylabHandler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def raylab_settings(self) -> Settings:
        settings: Settings = self.settings["raylab_settings"]
        return settings


class ProfilesHandler(RaylabHandler):
    @web.authenticated
    @authorized
    def get(self) -> None:
        s = self.raylab_settings
        o = s.options
        body = s.profiles.to_json()
        body["backend"] = s.backend
        body["quota"] = {
            "max_gpus_per_user": o.max_gpus_per_user,
            "max_clusters_per_user": o.max_clusters_per_user,
            "max_workers_per_cluster": o.max_workers_per_cluster,
        }
        self.finish(json.dumps(body))
