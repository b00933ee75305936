"""Per-cluster Ray token authentication: made with the cluster, kept for its owner, handed to
Ray only by raylab.

Ray (>= 2.52) checks a shared token on every gRPC server (GCS, raylets, Ray Client's proxy)
and on its HTTP servers (dashboard, Jobs API) once `RAY_AUTH_MODE=token` is in a process's
environment. Each raylab cluster gets its own random token:

- local backend: a file in the cluster's state folder, mode 0600, that every node reads
  through `RAY_AUTH_TOKEN_PATH`;
- KubeRay: a Secret owned by the RayCluster, read by every Ray container through
  `secretKeyRef` (backends/kuberay/manifest_security.py).

The kernel gets the token through `use_token` just before `ray.init` (a private 0600 file
named by `RAY_AUTH_TOKEN_PATH`, never the token itself in the environment or in output),
and `forget_token` takes it back on disconnect.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import tempfile
from pathlib import Path

from .errors import RaylabError

AUTH_MODE_ENV = "RAY_AUTH_MODE"
TOKEN_ENV = "RAY_AUTH_TOKEN"
TOKEN_PATH_ENV = "RAY_AUTH_TOKEN_PATH"
# Every variable through which a process could pick up some cluster's token: stripped from
# what a new cluster's nodes inherit, and replaced whole when the kernel switches clusters.
AUTH_ENV = (AUTH_MODE_ENV, TOKEN_ENV, TOKEN_PATH_ENV)
# Ray's dashboard reads this header when a proxy already uses Authorization for itself.
PROXY_HEADER = "X-Ray-Authorization"
# What the dashboard sets after a browser logs in with a token: never let it reach one.
TOKEN_COOKIE = "ray-authentication-token"
TOKEN_FILE = "auth_token"
SECRET_KEY = "auth_token"  # the key KubeRay's own auth samples use in the Secret


class TokenError(RaylabError):
    """A cluster's token cannot be read; the message names the file and what to do."""

    status = 409
    code = "token"


def new_token() -> str:
    """256 random bits, printable (Ray compares the whole string)."""
    return secrets.token_hex(32)


def bearer(token: str) -> str:
    return f"Bearer {token}"


def write_token_file(path: Path, token: str) -> None:
    """Write `token` to `path`, readable by its owner only from the first byte on."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, token.encode())
    finally:
        os.close(fd)
    tmp.replace(path)


def read_token_file(path: Path, cluster: str) -> str:
    """The token in `path`, refusing a file that is missing, empty or readable by others."""
    fix = (
        f"`%raycluster suspend {cluster}` then `%raycluster resume {cluster}` gives the "
        "cluster a new token"
    )
    try:
        info = path.stat()
        token = path.read_text().strip()
    except FileNotFoundError:
        raise TokenError(
            f"the Ray token of cluster {cluster!r} is missing: {path} does not exist",
            detail=fix,
        ) from None
    except OSError as exc:
        raise TokenError(
            f"cannot read the Ray token of cluster {cluster!r} from {path}: {exc.strerror}",
            detail=f"it must be a file readable by you (chmod 600 {path}), or {fix}",
        ) from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise TokenError(
            f"the Ray token file {path} of cluster {cluster!r} is open to other users "
            f"(mode {stat.S_IMODE(info.st_mode):04o})",
            detail=f"run `chmod 600 {path}`; then {fix}, since others may have read it",
        )
    if not token:
        raise TokenError(f"the Ray token file {path} of cluster {cluster!r} is empty", detail=fix)
    return token


def node_env(token_path: Path) -> dict[str, str]:
    """What every Ray process of a local cluster needs in its environment."""
    return {AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(token_path)}


# --- the kernel's side -----------------------------------------------------------------


def _private_folder() -> Path:
    folder = Path(tempfile.gettempdir()) / f"raylab-{os.getuid()}" / "auth"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)  # mkdir's mode is only a wish under a umask, and not for parents
    return folder


def private_token_file(key: str, token: str) -> Path:
    """A 0600 copy of `token` for this user's shells (`raylab env`)."""
    path = _private_folder() / f"{key}.token"
    write_token_file(path, token)
    return path


def _kernel_token_path() -> Path:
    """This process's private copy of the token of the cluster it is connected to."""
    return _private_folder() / f"kernel-{os.getpid()}"


def use_token(token: str | None) -> None:
    """Make this process's next Ray connection present `token` (None: no auth).

    Ray reads its auth settings once and caches them (RayConfig, and the token loader);
    both are reloaded here, as Ray's own code does after changing them, so one kernel
    can move between clusters with different tokens.
    """
    for name in AUTH_ENV:
        os.environ.pop(name, None)
    path = _kernel_token_path()
    if token is None:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.environ[AUTH_MODE_ENV] = "disabled"
    else:
        write_token_file(path, token)
        os.environ.update({AUTH_MODE_ENV: "token", TOKEN_PATH_ENV: str(path)})
    _reload_ray_auth()


def forget_token() -> None:
    """Drop the token this process was given (on disconnect)."""
    for name in AUTH_ENV:
        os.environ.pop(name, None)
    with contextlib.suppress(FileNotFoundError):
        _kernel_token_path().unlink()
    _reload_ray_auth()


def _reload_ray_auth() -> None:
    try:
        # Compiled, without type stubs for these two.
        from ray._raylet import AuthenticationTokenLoader, Config  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Ray is a dependency; nothing cached without it
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()
