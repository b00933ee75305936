"""The errors an export reports to the user: one line that says what to change."""

from __future__ import annotations

from ..errors import RaylabError


class ExportError(RaylabError):
    """The notebook cannot be turned into a pipeline as it is; nothing was written."""

    status = 422
    code = "export"
