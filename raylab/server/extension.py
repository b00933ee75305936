"""Wire raylab's handlers into a Jupyter server."""

from __future__ import annotations

from typing import Any

from jupyter_server.utils import url_path_join

from ..config import Settings
from .handlers import ProfilesHandler


def load(serverapp: Any) -> None:
    settings = Settings.from_config(serverapp.config)
    serverapp.web_app.settings["raylab_settings"] = settings
    base = url_path_join(serverapp.web_app.settings["base_url"], "raylab")
    serverapp.web_app.add_handlers(
        ".*$",
        [(url_path_join(base, "profiles"), ProfilesHandler)],
    )
    serverapp.log.info("raylab: serving %s (backend %s)", base, settings.backend)
