"""How the verbs show things: the one interface the magics' and the CLI's outputs share."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..model import ClusterInfo


class Output(Protocol):
    def line(self, text: str) -> None: ...
    def warn(self, text: str) -> None: ...
    def table(self, clusters: list[ClusterInfo], owner: bool) -> None: ...
    def block(self, text: str) -> None: ...
    def link(self, url: str, label: str) -> None: ...
    def card(self, info: ClusterInfo, fetch: Callable[[], ClusterInfo] | None = None) -> None:
        """Show the status card; with `fetch`, keep it current where the medium allows."""

    def progress(self, info: ClusterInfo, started: float) -> Any: ...
