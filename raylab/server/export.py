"""`POST <base_url>raylab/export`: the toolbar's export, thin over `export_notebook`.

Paths in and out are API paths, relative to the server's root (as the contents API
speaks them); one that would leave the root is refused before anything is read.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from ..errors import Forbidden, SpecError
from ..export import export_notebook
from ..spec import shown_field
from .handlers import RaylabHandler

FIELDS = frozenset({"path", "name", "cluster", "schedule", "cells", "force", "out"})


def resolve_in_root(root: Path, api_path: object, field: str) -> Path:
    """`api_path` (e.g. "work/train.ipynb") as a path inside `root`, symlinks resolved."""
    if not isinstance(api_path, str) or not api_path.strip("/"):
        raise SpecError(field, "a path relative to the server's root is required")
    parts = [p for p in api_path.replace("\\", "/").split("/") if p]
    if any(p in ("..", ".") for p in parts) or api_path.startswith("/"):
        raise SpecError(field, f"{api_path!r}: give a path inside the server's root")
    root = root.resolve()
    path = root.joinpath(*parts).resolve()
    if not path.is_relative_to(root):
        raise SpecError(field, f"{api_path!r} leads outside the server's root")
    return path


class ExportHandler(RaylabHandler):
    @property
    def root(self) -> Path:
        root = getattr(self.contents_manager, "root_dir", None) or self.settings.get(
            "server_root_dir", "."
        )
        return Path(str(root)).expanduser()

    @web.authenticated
    @authorized
    async def post(self) -> None:
        body = self.json_body()
        unknown = sorted(set(body) - FIELDS)
        if unknown:
            raise SpecError(shown_field(unknown[0]), f"unknown field {unknown[0][:40]!r}; allowed: "
                            f"{', '.join(sorted(FIELDS))}")  # fmt: skip
        # An export writes files: the caller must also be allowed to write contents.
        if not self.authorizer.is_authorized(self, self.current_user, "write", "contents"):
            raise Forbidden("you may not write files on this server")
        notebook = resolve_in_root(self.root, body.get("path"), "path")
        out = resolve_in_root(self.root, body["out"], "out") if body.get("out") else None
        for field in ("name", "cluster", "schedule", "cells"):
            if body.get(field) is not None and not isinstance(body[field], str):
                raise SpecError(field, "a string is expected")
        if not isinstance(body.get("force", False), bool):
            raise SpecError("force", "true or false")
        cluster = body.get("cluster")
        info = await self.blocking(self.service().get, cluster) if cluster else None
        run = functools.partial(
            export_notebook,
            notebook,
            out_dir=out,
            name=body.get("name"),
            cluster=info,
            settings=self.raylab_settings,
            schedule=body.get("schedule"),
            cells=body.get("cells") or "auto",
            force=bool(body.get("force", False)),
        )
        result = await self.blocking(run)
        reply: dict[str, Any] = {
            "name": result.name,
            "out_dir": result.out_dir.relative_to(self.root.resolve()).as_posix()
            if result.out_dir.is_relative_to(self.root.resolve())
            else str(result.out_dir),
            "files": result.files,
            "report": result.report,
            "warnings": result.warnings,
        }
        self.reply(reply, 201)
