"""What deploy/helm/raylab/values.schema.json must say about `settings` and `gpuTypes`,
derived from raylab itself (c.Raylab's traits, GpuProfile's fields), so that the chart
accepts exactly the options raylab reads, with their types."""

from __future__ import annotations

import dataclasses
from typing import Any

from traitlets import Bool, Dict, Enum, Float, Int, List, TraitType, Unicode

from raylab.config import Raylab
from raylab.profiles import GpuProfile

# Given by the chart's own gpuTypes value, not under settings.
FROM_GPU_TYPES = "gpu_types"


def _trait_schema(trait: TraitType[Any, Any]) -> dict[str, Any]:
    if isinstance(trait, Enum):
        return {"enum": list(trait.values or [])}
    if isinstance(trait, Bool):
        return {"type": "boolean"}
    if isinstance(trait, Int):
        return {"type": "integer"}
    if isinstance(trait, Float):
        return {"type": "number"}
    if isinstance(trait, Unicode):
        return {"type": "string"}
    if isinstance(trait, List):
        inner = trait._trait  # traitlets keeps the item trait here
        return {"type": "array", "items": _trait_schema(inner) if inner else {}}
    if isinstance(trait, Dict):
        value = trait._value_trait
        schema: dict[str, Any] = {"type": "object"}
        if value is not None:
            schema["additionalProperties"] = _trait_schema(value)
        return schema
    raise TypeError(f"no JSON schema for trait {trait!r}")


def settings_properties() -> dict[str, Any]:
    """The schema of each c.Raylab option, by name (gpu_types left out)."""
    props = {}
    for name, trait in sorted(Raylab.class_traits(config=True).items()):
        if name == FROM_GPU_TYPES:
            continue
        schema = _trait_schema(trait)
        if trait.help:
            schema["description"] = " ".join(trait.help.split())
        props[name] = schema
    return props


STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
TOLERATIONS = {
    "type": "array",
    "items": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "key": {"type": "string"},
            "operator": {"enum": ["Exists", "Equal"]},
            "value": {"type": "string"},
            "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
            "tolerationSeconds": {"type": "integer"},
        },
    },
}
_PROFILE_FIELDS: dict[str, dict[str, Any]] = {
    "description": {"type": "string"},
    "resource_key": {"type": "string"},
    "node_selector": STRING_MAP,
    "tolerations": TOLERATIONS,
    "head_node_selector": STRING_MAP,
    "head_tolerations": TOLERATIONS,
    "max_gpus_per_worker": {"type": "integer", "minimum": 0},
    "default_cpus": {"type": "string"},
    "default_memory": {"type": "string"},
    "idle_suspend_minutes": {"type": ["number", "null"], "minimum": 0},
    "local_queue": {"type": ["string", "null"]},
    "worker_env": STRING_MAP,
}


def gpu_type_schema() -> dict[str, Any]:
    """One GPU profile: GpuProfile's fields (a new field fails until it is added here)."""
    fields = [f.name for f in dataclasses.fields(GpuProfile) if f.name != "name"]
    assert sorted(fields) == sorted(_PROFILE_FIELDS), "GpuProfile's fields changed"
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["description"],
        "properties": {name: _PROFILE_FIELDS[name] for name in fields},
    }
