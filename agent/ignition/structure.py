"""The structural pass: JSON types, unknown keys and keys newer than the declared spec.

Driven by ``spec.TYPES``. Unknown keys and keys the declared version lacks are warnings
("unused key"), as Ignition reports them; a wrong JSON type is an error.
"""

from typing import Any

from agent.ignition import spec
from agent.ignition.findings import MISSING, Report, type_name


def _kind_name(kind: Any) -> str:
    if isinstance(kind, tuple):
        return "object" if kind[0] == "object" else f"array of {_kind_name(kind[1])}s"
    return kind


def _matches(value: Any, kind: Any) -> bool:
    if kind == spec.STR:
        return isinstance(value, str)
    if kind == spec.BOOL:
        return isinstance(value, bool)
    if kind == spec.INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind[0] == "object":
        return isinstance(value, dict)
    return isinstance(value, list)


def walk(value: dict, spec_type: str, path: str, declared: spec.Version, strict: bool, r: Report) -> None:
    fields = spec.TYPES[spec_type]
    for key, sub in value.items():
        sub_path = f"{path}.{key}"
        if key not in fields:
            r.warn(sub_path, f"unused key {key}", "unused-key")
            continue
        kind, since = fields[key]
        if strict and since > declared:
            r.warn(sub_path, f"unused key {key}: it needs spec {spec.version_text(since)} and the config "
                   f"declares {spec.version_text(declared)}", "unused-key")
            continue
        if sub is None:
            continue  # JSON null reads as "unset", as in Ignition
        _walk_kind(sub, kind, sub_path, declared, strict, r)


def _walk_kind(value: Any, kind: Any, path: str, declared: spec.Version, strict: bool, r: Report) -> None:
    if not _matches(value, kind):
        r.error(path, f"wrong type: expected {_kind_name(kind)}, got {type_name(value)}", "type", value
                if not isinstance(value, (dict, list)) else MISSING)
        return
    if isinstance(kind, tuple) and kind[0] == "object":
        walk(value, kind[1], path, declared, strict, r)
    elif isinstance(kind, tuple) and kind[0] == "list":
        for i, item in enumerate(value):
            if item is None and not isinstance(kind[1], tuple):
                r.error(f"{path}.{i}", f"wrong type: expected {_kind_name(kind[1])}, got null", "type")
                continue
            if item is None:
                continue
            _walk_kind(item, kind[1], f"{path}.{i}", declared, strict, r)

