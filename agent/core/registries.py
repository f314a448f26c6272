"""Is a change of ``/etc/containers/registries.conf`` safe without a drain?

The built-in policy reloads crio for this file, and drains first unless the change only adds
mirrors that are used for pulls by digest (``pull-from-mirror = "digest-only"``): such a mirror
can only serve the exact image a digest names, so running pods cannot see different images; or
only appends to ``unqualified-search-registries`` (as upstream drain.go:188-197).
Anything else (a removed or edited entry, a reordered search list, a tag mirror, or TOML that does
not parse) is treated as unsafe: a needless drain costs minutes, a missed one can cost a workload.
"""

import sys
from typing import Any, Dict, List, Optional, Union

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.9/3.10
    import tomli as tomllib

DIGEST_ONLY = "digest-only"
SEARCH = "unqualified-search-registries"

# Keys a brand-new [[registry]] entry may have and still only add digest-only mirrors.
_NEW_REGISTRY_KEYS = {"location", "prefix", "mirror"}


def _parse(data: Union[bytes, str, None]) -> Dict[str, Any]:
    if data is None:
        raise ValueError("contents unknown")
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return tomllib.loads(text)


def _key(reg: Dict[str, Any]) -> str:
    # containers-registries.conf(5): the prefix defaults to the location
    return str(reg.get("prefix") or reg.get("location") or "")


def _digest_only(mirror: Any) -> bool:
    return isinstance(mirror, dict) and mirror.get("pull-from-mirror") == DIGEST_ONLY and bool(mirror.get("location"))


def _only_added_mirrors(old: List[Any], new: List[Any]) -> Optional[str]:
    """None if ``new`` is ``old`` (same order) plus digest-only mirrors; else why not."""
    rest = list(new)
    for mirror in old:
        if mirror not in rest:
            return f"mirror {mirror.get('location') if isinstance(mirror, dict) else mirror!r} removed or changed"
        index = rest.index(mirror)
        extra, rest = rest[:index], rest[index + 1:]
        bad = [m for m in extra if not _digest_only(m)]
        if bad:
            return "a mirror that is not digest-only was added"
    if any(not _digest_only(m) for m in rest):
        return "a mirror that is not digest-only was added"
    return None


def why_drain(old: Union[bytes, str, None], new: Union[bytes, str, None]) -> Optional[str]:
    """None when the change from ``old`` to ``new`` only adds digest-only mirrors; else the reason
    a drain is needed. ``None`` contents (not known, e.g. fetched from a URL) need a drain."""
    try:
        a, b = _parse(old), _parse(new)
    except Exception as exc:  # tomllib.TOMLDecodeError, UnicodeDecodeError, unknown contents
        return f"cannot compare registries.conf ({exc})"
    regs_a, regs_b = a.get("registry", []), b.get("registry", [])
    if not isinstance(regs_a, list) or not isinstance(regs_b, list):
        return "unexpected [registry] shape"
    search_a, search_b = a.get(SEARCH, []), b.get(SEARCH, [])
    # Entries appended to the search list need no drain: names that resolved before still resolve
    # to the same registry first (upstream drain.go:188-197, isSafeContainerRegistryConfChanges).
    if not isinstance(search_a, list) or not isinstance(search_b, list) or search_b[:len(search_a)] != search_a:
        return f"{SEARCH} changed other than by appending"
    top_a = {k: v for k, v in a.items() if k not in ("registry", SEARCH)}
    top_b = {k: v for k, v in b.items() if k not in ("registry", SEARCH)}
    if top_a != top_b:
        changed = sorted(k for k in set(top_a) | set(top_b) if top_a.get(k) != top_b.get(k))
        return f"top-level settings changed: {', '.join(changed)}"
    index_b: Dict[str, Dict[str, Any]] = {}
    for reg in regs_b:
        if not isinstance(reg, dict):
            return "unexpected [[registry]] entry"
        index_b[_key(reg)] = reg
    seen = set()
    for reg in regs_a:
        if not isinstance(reg, dict):
            return "unexpected [[registry]] entry"
        key = _key(reg)
        seen.add(key)
        other = index_b.get(key)
        if other is None:
            return f"registry {key!r} removed"
        rest_a = {k: v for k, v in reg.items() if k != "mirror"}
        rest_b = {k: v for k, v in other.items() if k != "mirror"}
        if rest_a != rest_b:
            return f"registry {key!r} settings changed"
        why = _only_added_mirrors(list(reg.get("mirror") or []), list(other.get("mirror") or []))
        if why:
            return f"registry {key!r}: {why}"
    for key, reg in index_b.items():
        if key in seen:
            continue
        mirrors = reg.get("mirror") or []
        if set(reg) - _NEW_REGISTRY_KEYS or not mirrors or not all(_digest_only(m) for m in mirrors):
            return f"registry {key!r} added with more than digest-only mirrors"
    return None


def only_adds_digest_only_mirrors(old: Union[bytes, str, None], new: Union[bytes, str, None]) -> bool:
    return why_drain(old, new) is None

