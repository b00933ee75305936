"""EnvOptions: the environment options `up` and `connect` take, as the user typed them.

What a cluster remembers of them is `model.ClusterEnvironment`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EnvOptions:
    """What the user typed; None (or False) for an option not given."""

    working_dir: str | None = None
    no_sync: bool = False
    excludes: tuple[str, ...] | None = None
    pip: tuple[str, ...] | None = None
    requirements: str | None = None
    env: tuple[str, ...] | None = None

    @property
    def any_given(self) -> bool:
        return (
            self.working_dir is not None
            or self.no_sync
            or any(v is not None for v in (self.excludes, self.pip, self.requirements, self.env))
        )
