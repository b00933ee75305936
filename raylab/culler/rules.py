"""When an idle cluster is warned and suspended: pure, with the clock passed in.

The rules, as the README states them:

- A running cluster is idle while its dashboard reports no driver and no live actor
  (raylab/activity.py). Its idle clock starts when a culler first sees it idle, and any
  activity, Keep running, a suspend or a resume empties it.
- Once idle for the limit minus the warning time, the owner is warned: the cluster
  stores when it will be suspended, at least the full warning time later (a culler that
  was away never suspends without warning). Every door shows it.
- At that time, if it is still idle, it is suspended, with why and when kept on it. A
  warning is always stored (and so shown) for at least one sweep before a suspension.
- Activity that cannot be read never suspends a cluster. The idle clock survives an
  unreadable stretch shorter than the grace (a restarting head, a network blip) but is
  not advanced to a suspension while unreadable; after a longer one it starts again, so
  the cluster must be seen idle for the whole limit before it is suspended.
- A limit of 0 (CPU clusters by default) turns all of this off for the cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ..model import ClusterInfo, IdleState
from ..profiles import Profiles
from .activity import Activity


@dataclass(frozen=True)
class Policy:
    limit_s: float  # 0: never suspended for idleness
    warning_s: float
    unknown_grace_s: float


class Action(StrEnum):
    NONE = "none"  # nothing to write
    RECORD = "record"  # store the new idle state (idle since, activity unknown, cleared)
    WARN = "warn"  # store when it will be suspended: the owner is warned
    SUSPEND = "suspend"  # suspend it, keeping why


@dataclass(frozen=True)
class Decision:
    action: Action
    idle: IdleState


def policy_for(
    info: ClusterInfo,
    profiles: Profiles,
    warning_minutes: float,
    unknown_grace_minutes: float,
) -> Policy:
    """The admin's limit for the cluster's GPU type, or the owner's, if less."""
    profile = profiles.get(info.spec.gpu_type)
    limit = profile.idle_suspend_limit_minutes if profile is not None else 0.0
    asked = info.spec.idle_suspend_minutes
    if asked is not None and asked > 0 and (limit == 0 or asked < limit):
        limit = asked
    warning = max(0.0, min(warning_minutes, limit))
    return Policy(limit * 60, warning * 60, max(0.0, unknown_grace_minutes) * 60)


def decide(current: IdleState, activity: Activity, now: float, policy: Policy) -> Decision:
    """What to store on a running cluster after reading its activity at `now`."""
    if policy.limit_s <= 0 or activity.active:
        return _store(current, IdleState())
    if activity.state == "unknown":
        since = current.unknown_since if current.unknown_since is not None else now
        keep = now - since < policy.unknown_grace_s
        return _store(
            current,
            IdleState(
                since=current.since if keep else None,
                suspend_at=current.suspend_at if keep else None,
                unknown_since=since,
                unknown_reason=activity.why,
            ),
        )
    since = current.since if current.since is not None else now
    if current.suspend_at is not None and now >= current.suspend_at:
        return Decision(Action.SUSPEND, IdleState(since=since, suspended_at=now))
    deadline = since + policy.limit_s
    if current.suspend_at is None and now >= deadline - policy.warning_s:
        warned = IdleState(since=since, suspend_at=max(deadline, now + policy.warning_s))
        return Decision(Action.WARN, warned)
    return _store(current, IdleState(since=since, suspend_at=current.suspend_at))


def _store(current: IdleState, new: IdleState) -> Decision:
    return Decision(Action.NONE if new == current else Action.RECORD, new)
