"""The verbs of `%raycluster` and `raylab`: one parser (parser.py), one implementation
(verbs.py), and the environment options `up` and `connect` share (environment.py)."""

from .parser import CommandError, HelpShown
from .verbs import Commands

__all__ = ["CommandError", "Commands", "HelpShown"]
