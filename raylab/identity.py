"""Who the caller is, whether they are an admin, and who may see a cluster: one rule,
used by the service, the REST handlers and the dashboard proxy."""

from __future__ import annotations

import functools
import getpass
import hashlib
import json
import os
import re
import urllib.request
from collections.abc import Iterable

from .config import Settings
from .model import ClusterInfo

_LABEL_MAX = 63
_UNSAFE = re.compile(r"[^a-z0-9-]+")
_HASHED = re.compile(r"-[0-9a-f]{8}$")


def current_user() -> str:
    """The JupyterHub user in a single-user server, else the OS user."""
    return os.environ.get("JUPYTERHUB_USER") or getpass.getuser()


@functools.cache
def current_groups() -> tuple[str, ...]:
    """The JupyterHub groups of this server's user (asked of the hub once per process,
    with the server's own token), else none: as the server's identity says."""
    url, token = os.environ.get("JUPYTERHUB_API_URL"), os.environ.get("JUPYTERHUB_API_TOKEN")
    if not (url and token):
        return ()
    request = urllib.request.Request(
        url.rstrip("/") + "/user", headers={"Authorization": f"token {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as reply:
            groups = json.load(reply).get("groups") or []
    except (OSError, ValueError, AttributeError):
        return ()  # the hub away: no admin rights by group, as the safe side
    return tuple(str(g) for g in groups)


def owner_label(username: str) -> str:
    """A label value (and DNS label) for a username; distinct usernames never collide.

    A name that is already safe is kept as is. Any other gets a hash of the original
    appended, so "Alice@Example.com" (-> "alice-example-com-<hash>") and
    "alice-example-com" stay apart. Only [a-z0-9-] is used, a subset of what labels
    allow, so the value also fits `namespace_template` ("ray-{username}") as a DNS label,
    and a file name (the local GPU-hours ledger). A safe name that merely looks hashed
    is hashed too, so nobody can pick a username equal to another user's hashed form.
    """
    safe = _UNSAFE.sub("-", username.lower()).strip("-")
    if safe and safe == username and len(safe) <= _LABEL_MAX and not _HASHED.search(safe):
        return safe
    digest = hashlib.sha256(username.encode()).hexdigest()[:8]
    base = safe[: _LABEL_MAX - len(digest) - 1].rstrip("-") or "user"
    return f"{base}-{digest}"


def is_admin(settings: Settings, user: str, groups: Iterable[str] = ()) -> bool:
    """The one rule for who sees and manages every cluster: named, or in an admin group."""
    o = settings.options
    return user in o.admin_users or bool(set(groups) & set(o.admin_groups))


def may_see(info: ClusterInfo, user: str, admin: bool) -> bool:
    """Whether `user` may see (and manage) the cluster: its owner, or an admin. Anyone
    else is told it does not exist, so other users' cluster names do not leak."""
    return admin or info.owner == user
