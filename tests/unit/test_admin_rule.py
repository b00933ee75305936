"""Who is an admin: one rule (named users, or members of admin groups) for every door."""

from __future__ import annotations

import pytest

from raylab.commands import Commands
from raylab.config import Settings
from raylab.identity import is_admin

SETTINGS = Settings.from_config(admin_users=["root-admin"], admin_groups=["platform"])


@pytest.mark.parametrize(
    ("user", "groups", "admin"),
    [
        ("root-admin", (), True),
        ("carol", ("ml", "platform"), True),
        ("dave", ("ml",), False),
        ("platform", (), False),  # a group's name is not a user's
    ],
)
def test_named_users_and_group_members_are_admins(
    user: str, groups: tuple[str, ...], admin: bool
) -> None:
    assert is_admin(SETTINGS, user, groups) is admin


def test_the_magic_asks_the_same_rule() -> None:
    # In a JupyterHub kernel the groups come from the hub's API (identity.current_groups);
    # here they are given as the hub would give them.
    commands = Commands(_Silent(), prog="%raycluster", may_connect=False, settings=SETTINGS,
                        user="carol", groups=("ml", "platform"))  # fmt: skip
    assert commands.service("local").admin is True
    other = Commands(_Silent(), prog="%raycluster", may_connect=False, settings=SETTINGS,
                     user="dave", groups=("ml",))  # fmt: skip
    assert other.service("local").admin is False


class _Silent:
    def __getattr__(self, name: str) -> object:
        return lambda *a, **k: None
