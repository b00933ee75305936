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
from dataclasses import asdict, dataclass
from decimal import Decimal
from typing import Any

from .errors import SpecError
from .profiles import GpuProfile, Profiles

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
# ASCII digits only: str.isdigit() also accepts "¹" and "٣", which int() refuses.
_WHOLE = re.compile(r"\+?[0-9]+")
_FIELD_NAME = re.compile(r"[a-z][a-z0-9_]{0,39}")
MAX_GPUS = 1024
MAX_WORKERS = 512

FIELDS = (
    "name",
    "gpus",
    "gpu_type",
    "workers",
    "cpus",
    "memory",
    "image",
    "min_workers",
    "max_workers",
    "idle_timeout_minutes",
    "idle_suspend_minutes",
    "priority",
)


_STORED_TYPES: dict[str, tuple[type, ...]] = {
    "name": (str,),
    "gpus": (int,),
    "gpu_type": (str,),
    "workers": (int,),
    "cpus": (str,),
    "memory": (str,),
    "image": (str, type(None)),
    "min_workers": (int, type(None)),
    "max_workers": (int, type(None)),
    "idle_timeout_minutes": (int, type(None)),
    "idle_suspend_minutes": (int, float, type(None)),
    "priority": (str, type(None)),
}


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    gpus: int
    gpu_type: str
    workers: int
    cpus: str
    memory: str
    image: str | None = None
    min_workers: int | None = None
    max_workers: int | None = None
    idle_timeout_minutes: int | None = None
    # Suspend after this long idle; None: the admin's limit for the GPU type. Only less.
    idle_suspend_minutes: float | None = None
    # The Kueue WorkloadPriorityClass asked for (one the admin lists); None: the default.
    priority: str | None = None

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
            field = shown_field(unknown[0])
            raise SpecError(
                field, f"unknown field {_show(unknown[0])}; allowed: {', '.join(FIELDS)}"
            )
        d = profiles.defaults
        name = _name(data.get("name"))
        gpus, gpu_type = requested_gpus(data, profiles)
        workers = _int(data, "workers", d.workers, 0, MAX_WORKERS)
        profile = profiles.gpu_types[gpu_type]
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
        cpus = _quantity(data, "cpus", profile.default_cpus, memory=False)
        memory = _quantity(data, "memory", profile.default_memory, memory=True)
        image = data.get("image", d.image)
        if image is not None and (
            not isinstance(image, str) or len(image) > 255 or not _IMAGE.fullmatch(image)
        ):
            raise SpecError(
                "image",
                f"{_show(image)} is not an image reference such as rayproject/ray:2.60.0-py311-gpu",
            )
        min_w, max_w = _autoscaling(data, workers)
        idle = data.get("idle_timeout_minutes")
        if idle is not None:
            idle = _int(data, "idle_timeout_minutes", None, 1, 7 * 24 * 60)
        idle_suspend = _idle_suspend(data.get("idle_suspend_minutes"), profile)
        priority = data.get("priority")
        if priority is not None and (
            not isinstance(priority, str) or not _PRIORITY.fullmatch(priority)
        ):
            raise SpecError(
                "priority", f"{_show(priority)} is not a priority class name such as high"
            )
        return cls(
            name=name,
            gpus=gpus,
            gpu_type=gpu_type,
            workers=workers,
            cpus=cpus,
            memory=memory,
            image=image,
            min_workers=min_w,
            max_workers=max_w,
            idle_timeout_minutes=idle,
            idle_suspend_minutes=idle_suspend,
            priority=priority,
        )


def requested_gpus(data: Mapping[str, Any], profiles: Profiles) -> tuple[int, str]:
    """(GPUs, GPU type) a request asks for, each checked, the profiles' defaults where
    left out: all that a cluster's place in a queue depends on (`capacity`)."""
    gpus = _int(data, "gpus", profiles.defaults.gpus, 0, MAX_GPUS)
    gpu_type = data.get("gpu_type")
    if gpu_type is None:
        gpu_type = profiles.default_gpu_type(gpus)
    if not isinstance(gpu_type, str) or profiles.get(gpu_type) is None:
        raise SpecError(
            "gpu_type",
            f"unknown GPU type {_show(gpu_type)}; choose one of: {', '.join(profiles.gpu_types)}",
        )
    return gpus, gpu_type


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


def _idle_suspend(value: object, profile: GpuProfile) -> float | None:
    """The user's idle limit in minutes: less than the admin's for this GPU type, never more."""
    if value is None:
        return None
    field = "idle_suspend"
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


def _name(value: object) -> str:
    return generate_name() if value is None else validate_name(value)


def _show(value: object) -> str:
    """A short, safe rendering of user input for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _int(data: Mapping[str, Any], field: str, default: int | None, low: int, high: int) -> int:
    value = data.get(field)
    if value is None:
        if default is None:
            raise SpecError(field, "a whole number is required")
        return default
    return whole_number(value, field, low, high)


def whole_number(value: object, field: str, low: int, high: int) -> int:
    """`value` (an int, or digits from a command line or form) within low..high."""
    if isinstance(value, str) and _WHOLE.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise SpecError(field, f"{_show(value)} is not a whole number; use {low} to {high}")
    if not low <= value <= high:
        raise SpecError(field, f"{value} is out of range; use {low} to {high}")
    return value


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


def _quantity(data: Mapping[str, Any], field: str, default: str, *, memory: bool) -> str:
    value = data.get(field)
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


def _autoscaling(data: Mapping[str, Any], workers: int) -> tuple[int | None, int | None]:
    if data.get("min_workers") is None and data.get("max_workers") is None:
        return None, None
    low = _int(data, "min_workers", 0, 0, MAX_WORKERS)
    high = _int(data, "max_workers", max(workers, low, 1), 1, MAX_WORKERS)
    if low > high:
        raise SpecError("min_workers", f"min workers {low} is more than max workers {high}")
    if not low <= workers <= high:
        raise SpecError(
            "workers", f"{workers} workers is outside the autoscaling range {low}..{high}"
        )
    return low, high
