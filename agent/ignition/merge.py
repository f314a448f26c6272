"""Ignition config merging (``ignition.config.merge``) and replacing, as coreos/ignition does it.

Child wins on every field it sets; structs merge field by field; lists of keyed entries merge
entry by entry (same key: merged, new key: appended in the child's order); lists of plain
values are sets that keep their first order. Some keys are shared between lists: a path is one
node whether a file, directory or link, so a child link replaces a parent file at the same
path; a kernel argument the child wants absent leaves the parent's "should exist" list.
Pure: neither input is modified.
"""

import copy
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.ignition import spec


def _by(field: str) -> Callable[[dict], Any]:
    return lambda entry: entry.get(field)


def _partition_key(entry: dict) -> Any:
    number = entry.get("number")
    if isinstance(number, int) and number:
        return ("number", number)
    return ("label", entry.get("label"))


# type name of the list's parent -> list field -> key function
KEYS: Dict[Tuple[str, str], Callable[[dict], Any]] = {
    ("IgnitionConfig", "merge"): _by("source"),
    ("TLS", "certificateAuthorities"): _by("source"),
    ("ConfigResource", "httpHeaders"): _by("name"),
    ("Resource", "httpHeaders"): _by("name"),
    ("File", "append"): _by("source"),
    ("Passwd", "users"): _by("name"),
    ("Passwd", "groups"): _by("name"),
    ("Storage", "files"): _by("path"),
    ("Storage", "directories"): _by("path"),
    ("Storage", "links"): _by("path"),
    ("Storage", "disks"): _by("device"),
    ("Storage", "filesystems"): _by("device"),
    ("Storage", "raid"): _by("name"),
    ("Storage", "luks"): _by("name"),
    ("Disk", "partitions"): _partition_key,
    ("Clevis", "tang"): _by("url"),
    ("Systemd", "units"): _by("name"),
    ("Unit", "dropins"): _by("name"),
}

# lists whose keys share one namespace: a child entry in one removes the parent's in the others
SHARED = {
    "Storage": ("files", "directories", "links"),
    "KernelArguments": ("shouldExist", "shouldNotExist"),
}


def merge_ignition(parent: dict, child: dict) -> dict:
    """``child`` merged over ``parent`` (Ignition semantics). Version: the newer of the two."""
    out = _merge_struct(parent or {}, child or {}, "Config")
    versions = [spec.parse_version((c.get("ignition") or {}).get("version"))
                for c in (parent or {}, child or {}) if isinstance(c.get("ignition"), dict)]
    versions = [v for v in versions if v]
    if versions:
        out.setdefault("ignition", {})["version"] = spec.version_text(max(versions))
    return out


def replace_ignition(current: dict, replacement: dict) -> dict:
    """``ignition.config.replace``: the fetched config takes the place of the current one."""
    return copy.deepcopy(replacement)


def _kind_of(type_name: Optional[str], key: str) -> Any:
    if type_name is None:
        return None
    entry = spec.TYPES.get(type_name, {}).get(key)
    return entry[0] if entry else None


def _merge_struct(parent: dict, child: dict, type_name: Optional[str]) -> dict:
    out = copy.deepcopy(parent)
    shared = SHARED.get(type_name or "")
    if shared:
        _drop_shared(out, child, shared, type_name)
    for key, cval in child.items():
        if cval is None:
            continue  # unset in the child: the parent's value stays
        kind = _kind_of(type_name, key)
        pval = out.get(key)
        if isinstance(cval, dict) and isinstance(pval, dict):
            sub = kind[1] if isinstance(kind, tuple) and kind[0] == "object" else None
            out[key] = _merge_struct(pval, cval, sub)
        elif isinstance(cval, list) and isinstance(pval, list):
            out[key] = _merge_list(pval, cval, type_name, key, kind)
        else:
            out[key] = copy.deepcopy(cval)
    return out


def _merge_list(parent: List[Any], child: List[Any], type_name: Optional[str], key: str, kind: Any) -> List[Any]:
    keyfn = KEYS.get((type_name or "", key))
    item_type = kind[1][1] if isinstance(kind, tuple) and isinstance(kind[1], tuple) else None
    if keyfn is None:
        if all(not isinstance(x, (dict, list)) for x in parent + child):
            out: List[Any] = []
            for x in parent + child:  # a set that keeps order
                if x not in out:
                    out.append(x)
            return out
        return copy.deepcopy(child)
    out = [copy.deepcopy(x) for x in parent]
    index = {keyfn(x): i for i, x in enumerate(out) if isinstance(x, dict)}
    for entry in child:
        if not isinstance(entry, dict):
            out.append(copy.deepcopy(entry))
            continue
        k = keyfn(entry)
        if k in index:
            if item_type == "HTTPHeader" and entry.get("value") is None:
                out[index[k]] = None  # a header named without a value removes the parent's
                continue
            out[index[k]] = _merge_struct(out[index[k]], entry, item_type)
        else:
            index[k] = len(out)
            out.append(copy.deepcopy(entry))
    return [x for x in out if x is not None]


def _drop_shared(out: dict, child: dict, lists: Tuple[str, ...], type_name: Optional[str]) -> None:
    for name in lists:
        keyfn = KEYS.get((type_name or "", name))
        child_keys = set()
        for x in child.get(name) or []:
            child_keys.add(keyfn(x) if keyfn and isinstance(x, dict) else x if not isinstance(x, (dict, list)) else None)
        for other in lists:
            if other == name or not isinstance(out.get(other), list):
                continue
            okey = KEYS.get((type_name or "", other))
            out[other] = [x for x in out[other]
                          if (okey(x) if okey and isinstance(x, dict) else x) not in child_keys]
