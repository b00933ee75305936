"""Onboarding at spawn: a user's Ray namespace, service account, RoleBinding, quota and
LocalQueues, made by the hub before their server starts (hook.py says why there)."""

from __future__ import annotations

from .apply import FIELD_MANAGER, Onboarded, onboard
from .errors import OnboardingRefused
from .hook import SpawnOnboarding, pre_spawn_hook
from .objects import Plan, plan
from .settings import RaylabOnboarding, load

__all__ = [
    "FIELD_MANAGER",
    "Onboarded",
    "OnboardingRefused",
    "Plan",
    "RaylabOnboarding",
    "SpawnOnboarding",
    "load",
    "onboard",
    "plan",
    "pre_spawn_hook",
]
