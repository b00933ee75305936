"""The jobs' one error: a cell that cannot become a job, or a job that cannot be read."""

from __future__ import annotations

from ..errors import RaylabError


class JobError(RaylabError):
    """Shown as one line; nothing was submitted (or, for a job's verbs, changed)."""

    status = 422
    code = "job"
