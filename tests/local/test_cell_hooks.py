"""One set of cell hooks per shell: a magics made again (as a test or a reload makes one,
with another user's settings) replaces the old one's hooks instead of adding to them, so
a lost head is told once, by the newest, and cells are stamped once."""

from __future__ import annotations

from IPython.core.interactiveshell import InteractiveShell

from raylab.magics import RayclusterMagics


def hooks(shell: InteractiveShell) -> list[str]:
    return sorted(
        f"{event}:{getattr(hook, '__qualname__', hook)}"
        for event in ("pre_run_cell", "post_run_cell")
        for hook in shell.events.callbacks[event]
        if "raylab" in (getattr(hook, "__module__", "") or "")
    )


def test_a_magics_made_again_replaces_the_old_ones_hooks(shell: InteractiveShell) -> None:
    before = hooks(shell)
    assert len(before) == 5  # lost head ×2, the pip sync, the cell stamps ×2
    newest = RayclusterMagics(shell)
    shell.register_magics(newest)
    assert hooks(shell) == before
    ours = [h for e in ("pre_run_cell", "post_run_cell") for h in shell.events.callbacks[e]
            if getattr(h, "__self__", None) in (newest, newest.cell_stamps)]  # fmt: skip
    assert len(ours) == 5
