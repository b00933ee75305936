"""ClusterSpec: one validated request for a Ray cluster.

Parsed alike from magic arguments, CLI arguments and REST JSON. Every refusal is a
`SpecError` naming the field and what is allowed, raised before anything is created.
"""

from __future__ import annotations

import math
import re
import secrets
import string
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from decimal import Decimal
from typing import Any, get_args, get_type_hints

from .errors import SpecError
from .profiles import GpuProfile, Profiles
from .request_fields import DECLARATION, Draft, Field, Whole
from .request_fields import shown as _show

NAME_MAX = 40
# Every pattern below is used with `fullmatch`: `match` with `$` also accepts a trailing
# newline ("demo\n" would become a cluster, an image, a quantity).
# RFC 1123 label: what Kubernetes accepts as an object name that is also a DNS label.
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
# An OCI image reference: [registry[:port]/]path[:tag][@digest]. Strict on purpose: it
# ends up in a pod spec.
# A Kubernetes object name (DNS-1123 subdomain), as WorkloadPriorityClass names are.
_PRIORITY = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_IMAGE = re.compile(
    r"(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    r"[a-z0-9]+(?:[._-][a-z0-9]+)*"
    r"(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@sha256:[a-f0-9]{64})?"
)
_FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
MAX_GPUS = 1024
MAX_WORKERS = 512


# --- what the declarations below call: checks of one field, and across fields ----------


def _name(value: object, _: Draft) -> str:
    return generate_name() if value is None else validate_name(value)


def _gpu_type(value: object, draft: Draft) -> str:
    """The GPU type asked for, or the profiles' default for that many GPUs."""
    profiles = draft.profiles
    if value is None:
        value = profiles.default_gpu_type(draft.values["gpus"])
    if not isinstance(value, str) or profiles.get(value) is None:
        raise SpecError(
            "gpu_type",
            f"unknown GPU type {_show(value)}; choose one of: {', '.join(profiles.gpu_types)}",
        )
    return value


def _fits_gpu_type(workers: int, draft: Draft) -> None:
    """The GPUs split evenly across the workers, no more per worker than a node has."""
    gpus, gpu_type, profile = draft.values["gpus"], draft.values["gpu_type"], draft.profile
    if gpus and not profile.has_gpus:
        raise SpecError("gpus", f"GPU type {gpu_type!r} has no GPUs; ask for --gpus 0")
    if gpus and workers == 0:
        raise SpecError("workers", "GPUs run on workers; ask for at least one worker")
    if workers and gpus % workers:
        raise SpecError("gpus", _uneven(gpus, workers))
    per_worker = gpus // workers if workers else 0
    if per_worker > profile.max_gpus_per_worker:
        need = -(-gpus // profile.max_gpus_per_worker)
        raise SpecError(
            "gpus",
            f"{per_worker} GPUs per worker, but a {gpu_type} node has at most "
            f"{profile.max_gpus_per_worker}; use --workers {need} or more",
        )


def _cpus(value: object, draft: Draft) -> str:
    return _quantity(value, "cpus", draft.profile.default_cpus, memory=False)


def _memory(value: object, draft: Draft) -> str:
    return _quantity(value, "memory", draft.profile.default_memory, memory=True)


def _autoscales(draft: Draft) -> bool:
    return draft.data.get("min_workers") is not None or draft.data.get("max_workers") is not None


def _least_workers(draft: Draft) -> int | None:
    return 0 if _autoscales(draft) else None


def _most_workers(draft: Draft) -> int | None:
    values = draft.values
    return max(values["workers"], values["min_workers"], 1) if _autoscales(draft) else None


def _within_range(high: int | None, draft: Draft) -> None:
    """An autoscaling range that holds the workers asked for."""
    if high is None:
        return
    low, workers = draft.values["min_workers"], draft.values["workers"]
    if low > high:
        raise SpecError("min_workers", f"min workers {low} is more than max workers {high}")
    if not low <= workers <= high:
        raise SpecError(
            "workers", f"{workers} workers is outside the autoscaling range {low}..{high}"
        )


def _idle_suspend(value: object, draft: Draft) -> float | None:
    """The user's idle limit in minutes: less than the admin's for this GPU type, never more."""
    if value is None:
        return None
    field = "idle_suspend"
    profile = draft.profile
    try:
        minutes = parse_duration(value) / 60
    except ValueError:
        raise SpecError(field, f"{_show(value)} is not a duration such as 30m or 2h") from None
    limit = profile.idle_suspend_limit_minutes
    if minutes <= 0:
        if limit:
            raise SpecError(field, f"0 would never suspend; {_most(profile)}")
        return 0.0
    if limit and minutes > limit:
        raise SpecError(field, f"{_minutes(minutes)} is more than allowed; {_most(profile)}")
    return minutes


@dataclass(frozen=True)
class ClusterSpec:
    """One request for a Ray cluster. Each field is declared once, here, in its metadata
    (`request_fields`): its check, its command-line option and its place in the dialog.
    Fields are read in this order; a field's checks see the values of those above it."""

    name: str = field(metadata={DECLARATION: Field(
        flag="--name", help="DNS label, at most 40 characters (default: generated)",
        label="Name", placeholder="lowercase letters, digits, '-'; empty: generated",
        read=_name,
    )})  # fmt: skip
    gpus: int = field(metadata={DECLARATION: Whole(
        flag="--gpus", help="GPUs in the whole cluster, split evenly across workers",
        label="GPUs", low=0, high=MAX_GPUS, default=lambda d: d.profiles.defaults.gpus,
    )})  # fmt: skip
    gpu_type: str = field(metadata={DECLARATION: Field(
        flag="--gpu-type", help="a configured GPU type, e.g. a100",
        label="GPU type", kind="choice", read=_gpu_type,
    )})  # fmt: skip
    workers: int = field(metadata={DECLARATION: Whole(
        flag="--workers", help="worker nodes (default from the profile)",
        label="Workers", hint="Besides the head",
        low=0, high=MAX_WORKERS, default=lambda d: d.profiles.defaults.workers,
        then=_fits_gpu_type,
    )})  # fmt: skip
    cpus: str = field(metadata={DECLARATION: Field(
        flag="--cpus", help="CPUs per worker, e.g. 16 or 500m",
        label="CPUs per worker", kind="quantity", read=_cpus,
    )})  # fmt: skip
    memory: str = field(metadata={DECLARATION: Field(
        flag="--memory", help="memory per worker, e.g. 64Gi",
        label="Memory per worker", kind="quantity", read=_memory,
    )})  # fmt: skip
    image: str | None = field(default=None, metadata={DECLARATION: Field(
        flag="--image", help="Ray image (KubeRay)", label="Image",
        pattern=_IMAGE, max_length=255,
        refused="an image reference such as rayproject/ray:2.60.0-py311-gpu",
        default=lambda d: d.profiles.defaults.image,
    )})  # fmt: skip
    min_workers: int | None = field(default=None, metadata={DECLARATION: Whole(
        flag="--min-workers", help="autoscaling lower bound", label="Min workers",
        low=0, high=MAX_WORKERS, default=_least_workers,
    )})  # fmt: skip
    max_workers: int | None = field(default=None, metadata={DECLARATION: Whole(
        flag="--max-workers", help="autoscaling upper bound", label="Max workers",
        low=1, high=MAX_WORKERS, default=_most_workers, then=_within_range,
    )})  # fmt: skip
    idle_timeout_minutes: int | None = field(default=None, metadata={DECLARATION: Whole(
        flag=None, help="autoscaling: remove a worker idle this many minutes",
        label="Idle timeout (minutes)", dialog=False, low=1, high=7 * 24 * 60,
    )})  # fmt: skip
    # Suspend after this long idle; None: the admin's limit for the GPU type. Only less.
    idle_suspend_minutes: float | None = field(default=None, metadata={DECLARATION: Field(
        flag="--idle-suspend", metavar="DURATION",
        help="suspend after this long idle, e.g. 30m (at most your admin's limit)",
        label="Suspend when idle", kind="duration", dialog=False, read=_idle_suspend,
    )})  # fmt: skip
    # The Kueue WorkloadPriorityClass asked for (one the admin lists); None: the default.
    priority: str | None = field(default=None, metadata={DECLARATION: Field(
        flag="--priority", help="a Kueue priority class your admin allows (clusters that queue)",
        label="Priority", hint="Orders the queue; a higher one may preempt lower ones",
        kind="choice", pattern=_PRIORITY, refused="a priority class name such as high",
    )})  # fmt: skip

    @property
    def gpus_per_worker(self) -> int:
        return self.gpus // self.workers if self.workers else 0

    @property
    def autoscaling(self) -> bool:
        return self.max_workers is not None

    @property
    def most_workers(self) -> int:
        """The workers it may run at once: an autoscaling cluster's maximum, counted in
        full by the quotas (an autoscaler grows it without asking raylab again)."""
        return max(self.workers, self.max_workers or 0)

    @property
    def most_gpus(self) -> int:
        return self.gpus_per_worker * self.most_workers

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: object) -> ClusterSpec:
        """A spec raylab stored earlier, read back: a file or annotation can have been
        damaged or edited, so each field's type is checked (TypeError names it)."""
        if not isinstance(data, dict):
            raise TypeError("the spec is not an object")
        spec = cls(**data)
        for key, value in asdict(spec).items():
            kinds = _STORED_TYPES[key]
            if isinstance(value, bool) or not isinstance(value, kinds):
                raise TypeError(f"spec field {key!r} is {type(value).__name__}")
        return spec

    def with_workers(self, workers: int) -> ClusterSpec:
        """The same cluster with another worker count; GPUs per worker stay the same."""
        per_worker = self.gpus_per_worker
        return ClusterSpec(**{**asdict(self), "workers": workers, "gpus": per_worker * workers})

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], profiles: Profiles) -> ClusterSpec:
        """Validate a request; fields left out (or None) take the profiles' defaults."""
        if not isinstance(data, Mapping):
            raise SpecError("body", "expected a JSON object with cluster fields")
        unknown = sorted(str(k) for k in data if k not in FIELDS)
        if unknown:
            raise SpecError(
                shown_field(unknown[0]),
                f"unknown field {_show(unknown[0])}; allowed: {', '.join(FIELDS)}",
            )
        draft = Draft(data, profiles)
        for name, declared in REQUEST_FIELDS.items():
            declared.value(name, draft)
        return cls(**draft.values)


REQUEST_FIELDS: dict[str, Field] = {f.name: f.metadata[DECLARATION] for f in fields(ClusterSpec)}
FIELDS = tuple(REQUEST_FIELDS)


def _stored_types() -> dict[str, tuple[type, ...]]:
    """Each field's types as annotated; a float field also holds an int (30, not 30.0)."""
    hints = get_type_hints(ClusterSpec)
    stored = {}
    for name in FIELDS:
        kinds = get_args(hints[name]) or (hints[name],)
        stored[name] = (int, *kinds) if float in kinds else kinds
    return stored


_STORED_TYPES = _stored_types()


def describe_fields() -> list[dict[str, Any]]:
    """The request's fields as the New-cluster dialog draws them (`GET profiles`)."""
    return [declared.describe(name) for name, declared in REQUEST_FIELDS.items()]


def requested_gpus(data: Mapping[str, Any], profiles: Profiles) -> tuple[int, str]:
    """(GPUs, GPU type) a request asks for, each checked, the profiles' defaults where
    left out: all that a cluster's place in a queue depends on (`capacity`)."""
    draft = Draft(data, profiles)
    for name in ("gpus", "gpu_type"):
        REQUEST_FIELDS[name].value(name, draft)
    return draft.values["gpus"], draft.values["gpu_type"]


_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h|d)?")
_UNIT_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(value: object, default_unit: str = "m") -> float:
    """Seconds in `30m`, `90s`, `2h`, `1d` or a bare number (of `default_unit`); finite
    (a NaN compares false with every limit, and 400 digits make inf)."""
    try:
        if isinstance(value, int | float) and not isinstance(value, bool):
            amount, unit = float(value), default_unit
        elif isinstance(value, str) and (match := _DURATION.fullmatch(value.strip())):
            amount, unit = float(match.group(1)), match.group(2) or default_unit
        else:
            raise ValueError(value)
    except OverflowError:  # float() of a huge int
        raise ValueError(value) from None
    seconds = amount * _UNIT_S[unit]
    if not math.isfinite(seconds):
        raise ValueError(value)
    return seconds


def parse_since(text: str) -> float:
    """How far back `usage --since` and `GET usage?since=` look, in seconds (7d, 24h; a
    bare number is days)."""
    try:
        seconds = parse_duration(text, default_unit="d")
    except ValueError:
        raise SpecError("since", f"{text!r} is not a duration such as 7d or 24h") from None
    if seconds <= 0:  # parse_duration already refuses what is not finite
        raise SpecError("since", f"{text} is not a positive duration; use e.g. 7d")
    return seconds


def _minutes(minutes: float) -> str:
    return f"{minutes:g} min"


def _most(profile: GpuProfile) -> str:
    limit = profile.idle_suspend_limit_minutes
    return (
        f"{profile.name} clusters suspend after at most {_minutes(limit)} idle "
        f"(set by your admin): ask for {limit:g}m or less"
    )


def validate_name(value: object, field: str = "name") -> str:
    if not isinstance(value, str) or not value:
        raise SpecError(field, "a cluster name is required")
    if len(value) > NAME_MAX:
        raise SpecError(field, f"{_show(value)} is longer than {NAME_MAX} characters")
    if not _DNS_LABEL.fullmatch(value):
        raise SpecError(
            field,
            f"{_show(value)} is not a valid name: use lowercase letters, digits and '-', "
            "starting and ending with a letter or digit",
        )
    return value


def shown_field(key: object) -> str:
    """The field an error names for a key the user sent: the key when it looks like a
    field name, else "body" (an error never echoes arbitrary text as a field)."""
    return key if isinstance(key, str) and _FIELD_NAME.fullmatch(key) else "body"


def generate_name() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "ray-" + "".join(secrets.choice(alphabet) for _ in range(5))


def _uneven(gpus: int, workers: int) -> str:
    divisors = [w for w in range(1, gpus + 1) if gpus % w == 0 and w <= MAX_WORKERS]
    near = [g for g in range(workers, gpus + workers + 1, workers)][:2]
    lower = gpus - gpus % workers
    options = sorted({g for g in (lower, *near) if g > 0 and g % workers == 0})[:2]
    return (
        f"{gpus} GPUs cannot be split evenly across {workers} workers; "
        f"use --gpus {' or '.join(map(str, options))}, "
        f"or --workers {', '.join(map(str, divisors[:6]))}"
    )


def _quantity(value: object, field: str, default: str, *, memory: bool) -> str:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise SpecError(field, f"{_show(value)} is not a Kubernetes quantity")
    text = str(value).strip()
    example = "64Gi or 512Mi" if memory else "16 or 500m"
    try:
        amount = parse_quantity(text)
    except ValueError:
        raise SpecError(field, f"{_show(value)} is not a quantity such as {example}") from None
    if amount <= 0:
        raise SpecError(field, f"{_show(value)} must be more than zero, such as {example}")
    if memory and amount < 2**20:
        raise SpecError(field, f"{_show(value)} is less than 1Mi; did you mean {text}Gi?")
    if not memory and amount > 4096:
        raise SpecError(field, f"{_show(value)} CPUs is more than any node has")
    return text


_QUANTITY = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E)?")
_SUFFIX: dict[str, Decimal] = {
    "": Decimal(1), "m": Decimal("0.001"),
    **{k: Decimal(10) ** (3 * i) for i, k in enumerate("kMGTPE", start=1)},
    **{f"{k}i": Decimal(2) ** (10 * i) for i, k in enumerate("KMGTPE", start=1)},
}  # fmt: skip


def parse_quantity(text: str) -> Decimal:
    """A Kubernetes resource quantity (`16`, `500m`, `64Gi`) as a Decimal.

    Written here rather than imported from `kubernetes.utils` because that import costs
    ~0.45 s on every `%raycluster up`, and the client's parser also accepts exponent
    forms that the API server refuses in resource requests.
    """
    match = _QUANTITY.fullmatch(text)
    if not match:
        raise ValueError(text)
    return Decimal(match.group(1)) * _SUFFIX[match.group(2) or ""]
