"""One error vocabulary for every layer.

Each error carries a message a user can act on. The REST layer maps `status` to an HTTP
code and the magics show `message` without a traceback.
"""

from __future__ import annotations


class RaylabError(Exception):
    """Base class: an error whose message is meant for the user.

    Its JSON (REST) is `{"error": message, "detail": what to do, "field": the request
    field it concerns or null, "code": a stable name}`: clients branch on `code` and
    place the message by `field`, never by reading the English.
    """

    status = 400
    code = "error"

    def __init__(self, message: str, detail: str | None = None, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.field = field

    def to_json(self) -> dict[str, str | None]:
        return {"error": self.message, "detail": self.detail, "field": self.field,
                "code": self.code}  # fmt: skip


class SpecError(RaylabError):
    """A request field is invalid. `field` names it (for forms and JSON errors)."""

    status = 422
    code = "invalid"

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}", field=field)
        self.reason = reason

    def for_command_line(self) -> str:
        """The message with the field spelt as the option a magic or CLI user typed."""
        return f"--{str(self.field).replace('_', '-')}: {self.reason}"


class NotFound(RaylabError):
    status = 404
    code = "not_found"


class Conflict(RaylabError):
    status = 409
    code = "conflict"


class Forbidden(RaylabError):
    """RBAC refused the call (or, as QuotaExceeded, a quota is exhausted)."""

    status = 403
    code = "forbidden"


class QuotaExceeded(Forbidden):
    """A quota refused the request; `field` is what it limits (gpus, workers, name)."""

    code = "quota"


class BackendUnavailable(RaylabError):
    """The infrastructure (Kubernetes, the operator, Ray) is not reachable or not installed."""

    status = 503
    code = "unavailable"


class VersionMismatch(RaylabError):
    """The kernel and the cluster run different Ray or Python versions."""

    status = 409
    code = "version_mismatch"


class ClusterFailed(RaylabError):
    """The cluster reached Failed while we waited for it."""

    status = 409
    code = "cluster_failed"


class WaitTimeout(RaylabError):
    status = 504
    code = "timeout"
