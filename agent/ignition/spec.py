"""Ignition spec 3.0.0 .. 3.6.0: the shape of each version, and conversion between them.

One schema covers all supported versions: every field records the version that introduced it
(as in coreos/ignition's config/v3_*/types). Validation walks the document with it; conversion
to an older version refuses, with the JSON path of each field, anything the target lacks.
"""

import copy
from typing import Any, Dict, List, Optional, Tuple

from agent.errors import ConfigError, Problem

SUPPORTED_VERSIONS = ("3.0.0", "3.1.0", "3.2.0", "3.3.0", "3.4.0", "3.5.0", "3.6.0")
# Ignition (config/v3_7_experimental/config.go) parses these too; we validate them with the
# newest stable shape and a warning, and never produce or serve them.
EXPERIMENTAL_VERSIONS = ("3.7.0-experimental",)
NEWEST_VERSION = SUPPORTED_VERSIONS[-1]
DEFAULT_VERSION = "3.4.0"  # what an empty MachineConfig spec.config becomes (NodeConfig's default)

Version = Tuple[int, int, int]

STR = "string"
BOOL = "boolean"
INT = "integer"


def obj(name: str) -> Tuple[str, str]:
    return ("object", name)


def lst(item: Any) -> Tuple[str, Any]:
    return ("list", item)


V30, V31, V32, V33, V34, V35, V36 = ((3, 0, 0), (3, 1, 0), (3, 2, 0), (3, 3, 0), (3, 4, 0), (3, 5, 0), (3, 6, 0))

_NODE = {
    "path": (STR, V30),
    "overwrite": (BOOL, V30),
    "user": (obj("NodeOwner"), V30),
    "group": (obj("NodeOwner"), V30),
}

# type name -> {field: (kind, version that introduced it)}
TYPES: Dict[str, Dict[str, Tuple[Any, Version]]] = {
    "Config": {
        "ignition": (obj("Ignition"), V30),
        "kernelArguments": (obj("KernelArguments"), V33),
        "passwd": (obj("Passwd"), V30),
        "storage": (obj("Storage"), V30),
        "systemd": (obj("Systemd"), V30),
    },
    "Ignition": {
        "version": (STR, V30),
        "config": (obj("IgnitionConfig"), V30),
        "proxy": (obj("Proxy"), V31),
        "security": (obj("Security"), V30),
        "timeouts": (obj("Timeouts"), V30),
    },
    "IgnitionConfig": {
        "merge": (lst(obj("ConfigResource")), V30),
        "replace": (obj("ConfigResource"), V30),
    },
    # merge/replace entries and CAs: compression came with 3.1 (file contents had it from 3.0)
    "ConfigResource": {
        "source": (STR, V30),
        "compression": (STR, V31),
        "httpHeaders": (lst(obj("HTTPHeader")), V31),
        "verification": (obj("Verification"), V30),
    },
    "Resource": {
        "source": (STR, V30),
        "compression": (STR, V30),
        "httpHeaders": (lst(obj("HTTPHeader")), V31),
        "verification": (obj("Verification"), V30),
    },
    "HTTPHeader": {"name": (STR, V31), "value": (STR, V31)},
    "Verification": {"hash": (STR, V30)},
    "Proxy": {"httpProxy": (STR, V31), "httpsProxy": (STR, V31), "noProxy": (lst(STR), V31)},
    "Security": {"tls": (obj("TLS"), V30)},
    "TLS": {"certificateAuthorities": (lst(obj("ConfigResource")), V30)},
    "Timeouts": {"httpResponseHeaders": (INT, V30), "httpTotal": (INT, V30)},
    "KernelArguments": {"shouldExist": (lst(STR), V33), "shouldNotExist": (lst(STR), V33)},
    "Passwd": {"users": (lst(obj("PasswdUser")), V30), "groups": (lst(obj("PasswdGroup")), V30)},
    "PasswdUser": {
        "name": (STR, V30),
        "passwordHash": (STR, V30),
        "sshAuthorizedKeys": (lst(STR), V30),
        "uid": (INT, V30),
        "gecos": (STR, V30),
        "homeDir": (STR, V30),
        "noCreateHome": (BOOL, V30),
        "primaryGroup": (STR, V30),
        "groups": (lst(STR), V30),
        "noUserGroup": (BOOL, V30),
        "noLogInit": (BOOL, V30),
        "shell": (STR, V30),
        "system": (BOOL, V30),
        "shouldExist": (BOOL, V32),
    },
    "PasswdGroup": {
        "name": (STR, V30),
        "gid": (INT, V30),
        "passwordHash": (STR, V30),
        "system": (BOOL, V30),
        "shouldExist": (BOOL, V32),
    },
    "Storage": {
        "disks": (lst(obj("Disk")), V30),
        "raid": (lst(obj("Raid")), V30),
        "filesystems": (lst(obj("Filesystem")), V30),
        "files": (lst(obj("File")), V30),
        "directories": (lst(obj("Directory")), V30),
        "links": (lst(obj("Link")), V30),
        "luks": (lst(obj("Luks")), V32),
    },
    "NodeOwner": {"id": (INT, V30), "name": (STR, V30)},
    "File": dict(_NODE, **{
        "contents": (obj("Resource"), V30),
        "append": (lst(obj("Resource")), V30),
        "mode": (INT, V30),
    }),
    "Directory": dict(_NODE, **{"mode": (INT, V30)}),
    "Link": dict(_NODE, **{"target": (STR, V30), "hard": (BOOL, V30)}),
    "Disk": {
        "device": (STR, V30),
        "wipeTable": (BOOL, V30),
        "partitions": (lst(obj("Partition")), V30),
    },
    "Partition": {
        "label": (STR, V30),
        "number": (INT, V30),
        "sizeMiB": (INT, V30),
        "startMiB": (INT, V30),
        "typeGuid": (STR, V30),
        "guid": (STR, V30),
        "wipePartitionEntry": (BOOL, V30),
        "shouldExist": (BOOL, V30),
        "resize": (BOOL, V32),
    },
    "Filesystem": {
        "device": (STR, V30),
        "format": (STR, V30),
        "wipeFilesystem": (BOOL, V30),
        "label": (STR, V30),
        "uuid": (STR, V30),
        "options": (lst(STR), V30),
        "path": (STR, V30),
        "mountOptions": (lst(STR), V31),
    },
    "Raid": {
        "name": (STR, V30),
        "level": (STR, V30),
        "devices": (lst(STR), V30),
        "spares": (INT, V30),
        "options": (lst(STR), V30),
    },
    "Luks": {
        "name": (STR, V32),
        "device": (STR, V32),
        "keyFile": (obj("Resource"), V32),
        "label": (STR, V32),
        "uuid": (STR, V32),
        "options": (lst(STR), V32),
        "wipeVolume": (BOOL, V32),
        "clevis": (obj("Clevis"), V32),
        "discard": (BOOL, V34),
        "openOptions": (lst(STR), V34),
        "cex": (obj("Cex"), V35),
    },
    "Clevis": {
        "tpm2": (BOOL, V32),
        "tang": (lst(obj("Tang")), V32),
        "threshold": (INT, V32),
        "custom": (obj("ClevisCustom"), V32),
    },
    "ClevisCustom": {"pin": (STR, V32), "config": (STR, V32), "needsNetwork": (BOOL, V32)},
    "Tang": {"url": (STR, V32), "thumbprint": (STR, V32), "advertisement": (STR, V34)},
    "Cex": {"enabled": (BOOL, V35)},
    "Systemd": {"units": (lst(obj("Unit")), V30)},
    "Unit": {
        "name": (STR, V30),
        "enabled": (BOOL, V30),
        "mask": (BOOL, V30),
        "contents": (STR, V30),
        "dropins": (lst(obj("Dropin")), V30),
    },
    "Dropin": {"name": (STR, V30), "contents": (STR, V30)},
}

# Values (not fields) that need a newer spec than 3.0.0.
SOURCE_SCHEME_SINCE = {"gs": V32, "arn": V34}
HASH_FUNCTION_SINCE = {"sha512": V30, "sha256": V31}
FORMAT_SINCE = {"none": V33}
CLEVIS_PINS_BEFORE_36 = ("tpm2", "tang", "sss")


def parse_version(text: Any) -> Optional[Version]:
    """``"3.4.0"`` -> (3, 4, 0); None when not a plain MAJOR.MINOR.PATCH string."""
    if not isinstance(text, str):
        return None
    parts = text.split(".")
    if len(parts) != 3 or not all(p.isdigit() and p.isascii() for p in parts):
        return None
    if any(len(p) > 1 and p.startswith("0") for p in parts):
        return None
    return (int(parts[0]), int(parts[1]), int(parts[2]))


def version_text(v: Version) -> str:
    return f"{v[0]}.{v[1]}.{v[2]}"


def is_supported(version: str) -> bool:
    return version in SUPPORTED_VERSIONS


def newer_features(doc: Any, target: Version) -> List[Tuple[str, Version]]:
    """Every JSON path in ``doc`` that needs a spec newer than ``target``, with that spec."""
    found: List[Tuple[str, Version]] = []
    _walk_newer(doc, "Config", "$", target, found)
    return found


def _walk_newer(value: Any, type_name: str, path: str, target: Version, found: list) -> None:
    if not isinstance(value, dict):
        return
    fields = TYPES[type_name]
    for key, sub in value.items():
        if key not in fields or sub is None:
            continue
        kind, since = fields[key]
        sub_path = f"{path}.{key}"
        if since > target and not _is_empty(sub):
            found.append((sub_path, since))
            continue
        _walk_kind_newer(sub, kind, sub_path, target, found)
        if type_name in ("Resource", "ConfigResource"):
            _value_newer(key, sub, sub_path, target, found)
        elif type_name == "Filesystem" and key == "format" and sub in FORMAT_SINCE:
            if FORMAT_SINCE[sub] > target:
                found.append((sub_path, FORMAT_SINCE[sub]))
        elif type_name == "ClevisCustom" and key == "pin" and sub not in CLEVIS_PINS_BEFORE_36 and target < V36:
            found.append((sub_path, V36))  # any custom pin: 3.6.0 (Ignition release notes 2.25.0)


def _walk_kind_newer(value: Any, kind: Any, path: str, target: Version, found: list) -> None:
    if isinstance(kind, tuple) and kind[0] == "object":
        _walk_newer(value, kind[1], path, target, found)
    elif isinstance(kind, tuple) and kind[0] == "list" and isinstance(value, list):
        for i, item in enumerate(value):
            _walk_kind_newer(item, kind[1], f"{path}.{i}", target, found)


def _value_newer(key: str, value: Any, path: str, target: Version, found: list) -> None:
    if key == "source" and isinstance(value, str):
        scheme = value.split(":", 1)[0].lower() if ":" in value else ""
        since = SOURCE_SCHEME_SINCE.get(scheme)
        if since and since > target:
            found.append((path, since))
    elif key == "verification" and isinstance(value, dict) and isinstance(value.get("hash"), str):
        function = value["hash"].split("-", 1)[0]
        since = HASH_FUNCTION_SINCE.get(function)
        if since and since > target:
            found.append((path + ".hash", since))


def _is_empty(value: Any) -> bool:
    return value is None or value == {} or value == []


def convert_ignition(doc: dict, target_version: str) -> dict:
    """The same config declared as ``target_version``; never drops a field silently.

    Up-conversion only changes the version (every 3.x spec is a superset of the previous
    one). Down-conversion refuses, naming each field the target lacks and the spec it needs.
    """
    if not isinstance(doc, dict):
        raise ConfigError("an Ignition config must be a JSON object")
    target = parse_version(target_version)
    if target is None:
        raise ConfigError(f"invalid target Ignition spec version {target_version!r}")
    if target[0] == 2:
        raise ConfigError(f"Ignition spec {target_version} (2.x) is not supported: only 3.0.0 .. "
                          f"{NEWEST_VERSION} can be produced; the node needs a newer Ignition")
    if target_version not in SUPPORTED_VERSIONS:
        raise ConfigError(f"unsupported target Ignition spec version {target_version}; "
                          f"supported: {', '.join(SUPPORTED_VERSIONS)}")
    newer = newer_features(doc, target)
    if newer:
        problems = [Problem(p, f"needs spec {version_text(v)}; the node asked for {target_version}",
                            rule="spec-downgrade") for p, v in newer]
        lines = "; ".join(f"{p} needs spec {version_text(v)}" for p, v in newer)
        raise ConfigError(f"cannot convert to Ignition spec {target_version}: {lines}; "
                          f"the node asked for {target_version}", problems=problems)
    out = copy.deepcopy(doc)
    ign = out.get("ignition")
    if not isinstance(ign, dict):
        ign = {}
        out["ignition"] = ign
    ign["version"] = target_version
    return out


def best_version(accepted: List[str]) -> Optional[str]:
    """The newest supported version among ``accepted`` (an unknown higher 3.x gets our newest)."""
    best: Optional[Version] = None
    for text in accepted:
        v = parse_version(text)
        if v is None or v[0] != 3:
            continue
        if version_text(v) not in SUPPORTED_VERSIONS:
            v = parse_version(NEWEST_VERSION) if v > parse_version(NEWEST_VERSION) else None
        if v is not None and (best is None or v > best):
            best = v
    return version_text(best) if best else None
