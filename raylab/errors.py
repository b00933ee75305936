"""One error vocabulary for every layer.

Each error carries a message a user can act on. The REST layer maps `status` to an HTTP
code and the magics show `message` without a traceback.
"""

from __future__ import annotations


class RaylabError(Exception):
    """Base class: an error whose message is meant for the user."""

    status = 400

    def __init__(self, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail

    def to_json(self) -> dict[str, str | None]:
        return {"error": self.message, "detail": self.detail}


class SpecError(RaylabError):
    """A request field is invalid. `field` names it (for forms and JSON errors)."""

    status = 422

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", detail=field)
        self.field = field
        self.reason = reason

    def for_command_line(self) -> str:
        """The message with the field spelt as the option a magic or CLI user typed."""
        return f"--{self.field.replace('_', '-')}: {self.reason}"


class NotFound(RaylabError):
    status = 404


class Conflict(RaylabError):
    status = 409


class Forbidden(RaylabError):
    """RBAC refused the call, or a quota is exhausted."""

    status = 403


class QuotaExceeded(Forbidden):
    pass


class BackendUnavailable(RaylabError):
    """The infrastructure (Kubernetes, the operator, Ray) is not reachable or not installed."""

    status = 503


class VersionMismatch(RaylabError):
    """The kernel and the cluster run different Ray or Python versions."""

    status = 409


class ClusterFailed(RaylabError):
    """The cluster reached Failed while we waited for it."""

    status = 409


class WaitTimeout(RaylabError):
    status = 504
