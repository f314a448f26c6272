"""The structural pass: the document as Ignition's Go decoder sees it.

Driven by ``spec.TYPES``. It reports what ``encoding/json`` (coreos/ignition
config/util/parsingErrors.go ``HandleParseErrors``) and the unused-key check
(config/validate/validate.go ``ValidateUnusedKeys``) report, and returns the *decoded view*
the semantic rules then check:

- a key is matched to a field exactly or, failing that, case-insensitively, as Go does: so
  ``"Path": "/x"`` sets ``path`` (and is an "unused key" warning, since the exact name
  differs) and ``"Path": true`` is a type error;
- keys the declared spec lacks are unused keys (warnings) and are not decoded;
- JSON ``null`` leaves a field unset; a ``null`` list entry decodes to the zero value (an
  empty object, ``""``), which the semantic rules then judge like Ignition does;
- a wrong JSON type is an error at the field's path.

The view shares every unchanged subtree with the input (no copy for a clean document).
"""

from itertools import islice
from typing import Any, Dict, Optional, Tuple

from agent.ignition import spec
from agent.ignition.findings import MISSING, Report, type_name

GO_INT_MIN, GO_INT_MAX = -(1 << 63), (1 << 63) - 1  # Go's int on 64-bit hosts
_ZERO = {spec.STR: "", spec.BOOL: False, spec.INT: 0}


def _fold(key: str) -> str:
    """Go's case folding for field names (encoding/json foldName): K (Kelvin) is k, ſ is s."""
    return key.replace("\u212a", "k").replace("\u017f", "s").lower()


_FOLDED: Dict[str, Dict[str, str]] = {
    name: {_fold(field): field for field in fields} for name, fields in spec.TYPES.items()
}


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
        return isinstance(value, int) and not isinstance(value, bool) and GO_INT_MIN <= value <= GO_INT_MAX
    if kind[0] == "object":
        return isinstance(value, dict)
    return isinstance(value, list)


def walk(value: dict, spec_type: str, path: str, declared: spec.Version, strict: bool, r: Report) -> dict:
    """Report structural problems of ``value`` (a ``spec_type`` object); return its decoded view."""
    fields = spec.TYPES[spec_type]
    out: Optional[Dict[str, Any]] = None  # built only from the first difference on

    def changed(upto: int) -> Dict[str, Any]:
        return out if out is not None else dict(islice(value.items(), upto))

    for n, (key, sub) in enumerate(value.items()):
        sub_path = f"{path}.{key}"
        # a key that is no string (a YAML-loaded dict passed in) is no field: an unused key
        field = key if key in fields else _FOLDED[spec_type].get(_fold(key)) if isinstance(key, str) else None
        if field is None or field != key:
            r.warn(sub_path, f"unused key {key}" + (f" (Go's decoder reads it as {field!r})" if field else ""),
                   "unused-key")
            out = changed(n)
            if field is None:
                continue
        kind, since = fields[field]
        if strict and since > declared:
            r.warn(sub_path, f"unused key {key}: it needs spec {spec.version_text(since)} and the config "
                   f"declares {spec.version_text(declared)}", "unused-key")
            out = changed(n)
            continue
        ok, view = (False, None) if sub is None else _walk_kind(sub, kind, f"{path}.{field}", declared, strict, r)
        if not ok:  # JSON null leaves the field unset, as in Ignition; a wrong type too
            out = changed(n)
            out.pop(field, None)
            continue
        if out is None and view is sub:
            continue
        out = changed(n)
        out.pop(field, None)  # a later spelling wins, as in Go; keep document order
        out[field] = view
    return value if out is None else out


def _walk_kind(value: Any, kind: Any, path: str, declared: spec.Version, strict: bool, r: Report) -> Tuple[bool, Any]:
    if not _matches(value, kind):
        r.error(path, f"wrong type: expected {_kind_name(kind)}, got {type_name(value)}", "type",
                value if not isinstance(value, (dict, list)) else MISSING)
        return False, None
    if isinstance(kind, tuple) and kind[0] == "object":
        return True, walk(value, kind[1], path, declared, strict, r)
    if isinstance(kind, tuple) and kind[0] == "list":
        return True, _walk_list(value, kind[1], path, declared, strict, r)
    return True, value


def _walk_list(value: list, item_kind: Any, path: str, declared: spec.Version, strict: bool, r: Report) -> list:
    out = []
    changed = False
    for i, item in enumerate(value):
        if item is None:
            # Go decodes a null entry to the zero value (config/v3_*/types: lists of structs
            # and strings); the rules judge that value like any other
            out.append({} if isinstance(item_kind, tuple) else _ZERO[item_kind])
            changed = True
            continue
        ok, view = _walk_kind(item, item_kind, f"{path}.{i}", declared, strict, r)
        out.append(view if ok else _ZERO.get(item_kind, {}) if not isinstance(item_kind, tuple) else {})
        changed = changed or not ok or view is not item
    return out if changed else value
