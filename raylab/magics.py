"""`%raycluster`: thin over `commands.Commands`; errors shown as one line, no traceback."""

from __future__ import annotations

import contextlib
import sys
import weakref
from collections.abc import Callable
from typing import Any, cast

from IPython.core.error import UsageError
from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display as _display

from .commands import CommandError, Commands, HelpShown
from .display import render
from .display.widgets import StatusCard, card_text, in_notebook, progress_view
from .errors import RaylabError
from .jobs.value import JobValue
from .kernel.cell_stamps import CellStamps
from .model import ClusterInfo
from .sync.pip import synced_install

display = cast(Callable[..., None], _display)  # IPython.display is not typed


class NotebookOutput:
    """Rich output in a notebook, plain lines in terminal IPython."""

    def line(self, text: str) -> None:
        print(text, flush=True)

    def warn(self, text: str) -> None:
        print(f"Warning: {text}", file=sys.stderr, flush=True)

    def table(self, clusters: list[ClusterInfo], owner: bool) -> None:
        display(
            {
                "text/plain": render.text_table(clusters, owner=owner),
                "text/html": render.html_table(clusters, owner=owner),
            },
            raw=True,
        )

    def block(self, text: str) -> None:
        print(text, end="" if text.endswith("\n") else "\n", flush=True)

    def link(self, url: str, label: str) -> None:
        import html

        display(
            {
                "text/plain": f"{label}: {url}",
                "text/html": f'<a href="{html.escape(url)}" target="_blank" '
                f'rel="noopener">{html.escape(label)}</a>',
            },
            raw=True,
        )

    def card(self, info: ClusterInfo, fetch: Callable[[], ClusterInfo] | None = None) -> None:
        if in_notebook():
            card = StatusCard(info)
            if fetch is not None:
                card.follow(fetch)  # live, like the sidebar's card
            return
        display({"text/plain": card_text(info), "text/html": render.card_html(info)}, raw=True)

    def progress(self, info: ClusterInfo, started: float) -> Any:
        return progress_view(info, started)


_HOOKED: weakref.WeakKeyDictionary[Any, RayclusterMagics] = weakref.WeakKeyDictionary()


@magics_class
class RayclusterMagics(Magics):
    def __init__(self, shell: Any) -> None:
        super().__init__(shell)
        self.commands = Commands(
            NotebookOutput(), prog="%raycluster", may_connect=True,
            cells=lambda: [str(c) for c in shell.user_ns.get("In", [])],
        )  # fmt: skip
        # A running cell is work: the cullers do not suspend its cluster meanwhile.
        self.cell_stamps = CellStamps(_connected_cluster, self.commands.mark_cell)
        self._hooks: list[tuple[str, Callable[..., None]]] = [
            ("pre_run_cell", self._lost_head),
            ("post_run_cell", self._lost_head),
            ("post_run_cell", self._after_cell),
            ("pre_run_cell", self.cell_stamps.pre_run_cell),
            ("post_run_cell", self.cell_stamps.post_run_cell),
        ]
        # One set of cell hooks per shell, the newest magics' (a magics made again, with
        # another user's settings, must not leave the old one answering a lost head).
        previous = _HOOKED.get(shell)
        if previous is not None:
            previous._unhook()
        _HOOKED[shell] = self
        for event, hook in self._hooks:
            shell.events.register(event, hook)

    def _unhook(self) -> None:
        shell: Any = self.shell
        for event, hook in self._hooks:
            with contextlib.suppress(ValueError):
                shell.events.unregister(event, hook)

    @line_cell_magic
    def raycluster(self, line: str, cell: str | None = None) -> Any:
        """Ray clusters for this notebook: `%raycluster --help` lists the verbs;
        `%%raycluster job [NAME]` runs the cell as a Ray Job on the cluster."""
        try:
            done = self.commands.run_line(line) if cell is None else self._cell(line, cell)
            # A job's value is the cell's (`x = %raycluster job result NAME` too).
            return done.value if isinstance(done, JobValue) else None
        except HelpShown as shown:
            print(shown, end="")
        except CommandError as exc:
            raise UsageError(str(exc)) from None
        except RaylabError as exc:
            raise UsageError(exc.message + (f"\n{exc.detail}" if exc.detail else "")) from None
        except KeyboardInterrupt:
            print("Interrupted. Nothing was deleted: `%raycluster list` shows your clusters.")

    def _cell(self, line: str, cell: str) -> Any:
        verb, _, rest = line.strip().partition(" ")
        if verb != "job":
            raise CommandError(
                "only `%%raycluster job [NAME]` takes a cell; for the other verbs use one % "
                "(`%raycluster --help`)"
            )
        # In[n] is cell n as Python, this one last (stored before it runs); In[0] is "".
        # (execution_count is already the next cell's number by now.)
        shell: Any = self.shell
        history = [str(c) for c in shell.user_ns.get("In", [])]
        number = len(history) - 1
        return self.commands.submit_job(rest, cell, history[1:-1], number)

    def _lost_head(self, _: Any = None) -> None:
        """Said once, in the cell that was stopped or the next one: the head this kernel
        drove went away (driver_watch.py)."""
        from .kernel.connect import report_lost

        lost = report_lost()
        if lost is not None:
            print(self.commands.lost_line(lost), file=sys.stderr)

    def _after_cell(self, result: Any) -> None:
        """With c.Raylab.sync_pip: a plain `%pip install` also reaches the cluster."""
        from .kernel.connect import connected_cluster

        if connected_cluster() is None or not result.success:
            return
        cell = str(getattr(result.info, "raw_cell", "") or "")
        if "pip" not in cell or cell.lstrip().startswith("%raycluster"):
            return
        try:
            if not self.commands.settings.options.sync_pip:
                return
            requirements, local = synced_install(cell)
            if requirements or local:
                self.commands.add_requirements(requirements)
        except RaylabError as exc:
            print(f"Warning: not added to the cluster: {exc.message}", file=sys.stderr)


def _connected_cluster() -> str | None:
    from .kernel.connect import connected_cluster  # on first use: `%load_ext` stays quick

    return connected_cluster()


__all__ = ["RayclusterMagics", "in_notebook"]
