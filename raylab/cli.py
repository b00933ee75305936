"""`raylab` on the command line: the same verbs as `%raycluster`, without connecting."""

from __future__ import annotations

import sys
from collections.abc import Callable

from .commands import CommandError, Commands, HelpShown
from .display import render
from .display.widgets import TextProgress
from .errors import RaylabError
from .model import ClusterInfo


class TerminalOutput:
    def line(self, text: str) -> None:
        print(text, flush=True)

    def warn(self, text: str) -> None:
        print(f"warning: {text}", file=sys.stderr, flush=True)

    def table(self, clusters: list[ClusterInfo], owner: bool) -> None:
        print(render.text_table(clusters, owner=owner))

    def block(self, text: str) -> None:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")

    def link(self, url: str, label: str) -> None:
        print(f"{label}: {url}")

    def card(self, info: ClusterInfo, fetch: Callable[[], ClusterInfo] | None = None) -> None:
        print(info.name)
        for key, value in render.card_fields(info):
            print(f"  {key + ':':<11} {value}")

    def progress(self, info: ClusterInfo, started: float) -> TextProgress:
        return TextProgress(info, started)


def main(argv: list[str] | None = None) -> int:
    commands = Commands(TerminalOutput(), prog="raylab", may_connect=False)
    try:
        commands.run(sys.argv[1:] if argv is None else argv)
    except HelpShown as shown:
        print(shown, end="")
    except CommandError as exc:
        print(f"raylab: error: {exc}", file=sys.stderr)
        return 2
    except RaylabError as exc:
        print(f"raylab: {exc.message}", file=sys.stderr)
        if exc.detail:
            print(f"  {exc.detail}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted; nothing was deleted (`raylab list` shows your clusters)")
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
