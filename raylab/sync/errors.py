"""Ray's "Failed to create runtime_env" as one line a user can act on.

Ray Client reports a runtime environment that cannot be set up (a pip requirement that
does not resolve, a package that fails to unpack) as a ConnectionAbortedError holding
the remote tracebacks of the proxy and the runtime-env agent, and pip's own output.
What matters is pip's ERROR line, else the last line of the error.
"""

from __future__ import annotations

import re

from ..errors import RaylabError

_MARK = "Failed to create runtime_env"
_PIP_ERROR = re.compile(r"^\s*ERROR: (.+)$", re.MULTILINE)
_LAST_ERROR = re.compile(r"^\s*(?:[\w.]+(?:Error|Exception)): (.+)$", re.MULTILINE)


class RuntimeEnvFailed(RaylabError):
    status = 422
    code = "runtime_env_failed"


def runtime_env_failure(text: str) -> str | None:
    """The reason in Ray's message, or None when it is not a runtime-env failure."""
    if _MARK not in text:
        return None
    pip = _PIP_ERROR.findall(text)
    if pip:
        return "pip: " + str(pip[-1]).strip()
    errors = [str(e) for e in _LAST_ERROR.findall(text) if _MARK not in str(e)]
    reason = errors[-1].strip() if errors else text.strip().splitlines()[-1].strip()
    return reason if len(reason) <= 300 else reason[:297] + "..."
