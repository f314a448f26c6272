"""Ignition spec 2.2 -> 3.2, as the MCO converts a spec 2.2 MachineConfig (pure).

The MCO accepts MachineConfigs written in spec 2.2 and converts them before merging
(pkg/controller/common/helpers.go:612-668, ``ParseAndConvertConfig``):

1. ``removeIgnDuplicateFilesUnitsUsers``: duplicate files (same path) and units (same name) are
   dropped, the last one wins and the survivors come out in reverse order; a duplicate unit's
   drop-ins are added to the winner; every user must be ``core`` and their SSH keys are joined.
2. ``convertIgnition2to3``: ign-converter's ``v23tov30.Translate`` with only the ``root``
   filesystem mounted at ``/`` (translate/v23tov30/v23tov30.go), then 3.0 -> 3.1 -> 3.2.

The converter refuses what it cannot say in spec 3: networkd units, filesystems other than
``root``, deprecated fields (a unit's ``enable``, a user's ``create``, a partition's ``size``/
``start`` in sectors), two entries for one path, a path under a link the config itself writes.
We refuse the same, each with the JSON path of the 2.2 entry and what to write instead.

Output is exactly what the Go structs marshal to (the MCO's JSON encoder drops unset pointers,
empty strings behind ``StrP`` and false behind ``BoolP``): a 2.x file without ``overwrite``
gets ``overwrite: true`` (spec 2 always overwrote), an ``append: true`` file becomes a spec 3
``append`` list with ``overwrite: false``, ``filesystem: root`` disappears into the path.
"""

import posixpath
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.errors import Problem

SOURCE_VERSIONS = ("2.2.0",)  # what the MCO parses (ign2 = config/v2_2)
TARGET_VERSION = "3.2.0"  # what convertIgnition2to3 produces
ROOT_FS = "root"
_UPSTREAM = "as the MCO's conversion (ign-converter v23tov30) does"


def is_spec2(cfg: Any) -> bool:
    """A config whose ``ignition.version`` is 2.x (any 2.x: the unsupported ones get an error)."""
    if not isinstance(cfg, dict) or not isinstance(cfg.get("ignition"), dict):
        return False
    version = cfg["ignition"].get("version")
    return isinstance(version, str) and version.startswith("2.")


class _Report:
    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def error(self, path: str, message: str, rule: str, **kw: Any) -> None:
        self.problems.append(Problem(path, message, rule=rule, **kw))


def translate(cfg: Dict[str, Any]) -> Tuple[Optional[Dict[str, Any]], List[Problem]]:
    """(the spec 3.2 config or None, problems at the 2.2 config's own JSON paths)."""
    rep = _Report()
    version = (cfg.get("ignition") or {}).get("version")
    if version not in SOURCE_VERSIONS:
        rep.error("$.ignition.version", "only spec 2.2.0 of the 2.x specs is accepted (the MCO parses 2.2 "
                  "only); write the config in spec 3.x", "version-2x", value=version)
        return None, rep.problems
    _check(cfg, rep)
    if rep.problems:
        return None, rep.problems
    files, units, users = _dedupe(cfg, rep)
    if rep.problems:
        return None, rep.problems
    out = _prune({
        "ignition": _ignition(cfg.get("ignition") or {}),
        "passwd": {"users": [_user(u) for u in users],
                   "groups": [_group(g) for g in _list(cfg, "passwd", "groups")]},
        "systemd": {"units": [_unit(u) for u in units]},
        "storage": {
            "disks": [_disk(d) for d in _list(cfg, "storage", "disks")],
            "raid": [_raid(r) for r in _list(cfg, "storage", "raid")],
            "files": [_file(f) for f in files],
            "directories": [_directory(d) for d in _list(cfg, "storage", "directories")],
            "links": [_link(ln) for ln in _list(cfg, "storage", "links")],
        },
    })
    return out, []


def source_index(cfg: Dict[str, Any]) -> Callable[[str], str]:
    """Maps a JSON path of the translated config back to the 2.2 entry it came from.

    Files and units are reordered by the dedupe step; other lists keep their order.
    """
    maps = {"storage.files": _order(_list(cfg, "storage", "files"), lambda f: f.get("path")),
            "systemd.units": _order(_list(cfg, "systemd", "units"), lambda u: u.get("name"))}

    def back(path: str) -> str:
        for section, order in maps.items():
            m = re.match(r"^\$\." + re.escape(section) + r"\.(\d+)(.*)$", path)
            if m and int(m.group(1)) < len(order):
                return f"$.{section}.{order[int(m.group(1))]}{m.group(2)}"
        return path
    return back


# -- refusals (v23tov30.Check2_3 and the MCO's own checks) -----------------------------------


def _list(cfg: Dict[str, Any], section: str, key: str) -> List[Dict[str, Any]]:
    value = (cfg.get(section) or {}).get(key) if isinstance(cfg.get(section), dict) else None
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# The objects and arrays the conversion reads below a section: a wrong type there is a decode
# error for the MCO (the 2.2 config is read into Go structs), so a refusal here, at its path.
_RES = {"verification": {}}
_NODE = {"user": {}, "group": {}}
_SHAPES: Dict[str, Any] = {
    "ignition": {"config": {"replace": _RES, "append": [_RES]}, "security": {"tls": {"certificateAuthorities": [_RES]}},
                 "timeouts": {}},
    "storage": {"disks": [{"partitions": [{}]}], "raid": [{"devices": [None], "options": [None]}],
                "files": [dict(_NODE, contents=_RES)], "directories": [_NODE], "links": [_NODE],
                "filesystems": [{}]},
    "systemd": {"units": [{"dropins": [{}]}]},
    "networkd": {"units": [{}]},
    "passwd": {"users": [{"sshAuthorizedKeys": [None], "groups": [None]}], "groups": [{}]},
}


def _check_shape(value: Any, shape: Any, path: str, rep: _Report) -> None:
    """Report the first value of a wrong JSON type under ``path`` (null is unset, as in Go)."""
    if value is None or shape is None:
        return
    if isinstance(shape, list):
        if not isinstance(value, list):
            rep.error(path, "wrong type: expected array", "type")
            return
        for i, item in enumerate(value):
            _check_shape(item, shape[0], f"{path}.{i}", rep)
    elif not isinstance(value, dict):
        rep.error(path, "wrong type: expected object", "type")
    else:
        for key, sub in shape.items():
            _check_shape(value.get(key), sub, f"{path}.{key}", rep)


def _check(cfg: Dict[str, Any], rep: _Report) -> None:
    for section, shape in _SHAPES.items():
        _check_shape(cfg.get(section), shape, f"$.{section}", rep)
    if rep.problems:
        return
    for section, key in (("storage", "files"), ("storage", "directories"), ("storage", "links"),
                         ("storage", "disks"), ("storage", "raid"), ("storage", "filesystems"),
                         ("systemd", "units"), ("passwd", "users"), ("passwd", "groups")):
        value = (cfg.get(section) or {}).get(key) if isinstance(cfg.get(section), dict) else None
        if value is not None and (not isinstance(value, list) or not all(isinstance(v, dict) for v in value)):
            rep.error(f"$.{section}.{key}", "wrong type: expected array of objects", "type")
    if rep.problems:
        return
    if _list(cfg, "networkd", "units"):
        rep.error("$.networkd.units", "networkd units cannot be converted to spec 3 (the MCO refuses them too); "
                  "write them as files under /etc/systemd/network", "spec2-networkd")
    for i, fs in enumerate(_list(cfg, "storage", "filesystems")):
        if fs.get("name") != ROOT_FS:
            rep.error(f"$.storage.filesystems.{i}.name", "only the root filesystem can be converted (the MCO "
                      "mounts no other); write this MachineConfig in spec 3.x with a filesystem path",
                      "spec2-filesystem", value=fs.get("name"))
    _check_nodes(cfg, rep)
    _check_units(cfg, rep)
    for i, user in enumerate(_list(cfg, "passwd", "users")):
        if "create" in user:
            rep.error(f"$.passwd.users.{i}.create", "deprecated in spec 2 and refused by the conversion "
                      "(as upstream); set the user's fields directly", "spec2-deprecated")
        if user.get("name") != "core":
            # removeIgnDuplicateFilesUnitsUsers: "Only core user is supported".
            rep.error(f"$.passwd.users.{i}.name", "only the core user is supported in a MachineConfig (as the MCO)",
                      "spec2-user", value=user.get("name"))
    for i, disk in enumerate(_list(cfg, "storage", "disks")):
        for k, part in enumerate(disk.get("partitions") or []):
            for key in ("size", "start"):
                if isinstance(part, dict) and key in part:
                    rep.error(f"$.storage.disks.{i}.partitions.{k}.{key}", f"{key} in sectors is deprecated and "
                              f"refused by the conversion (as upstream); use {key}MiB in spec 3.x", "spec2-deprecated")


def _check_nodes(cfg: Dict[str, Any], rep: _Report) -> None:
    links = [_join(ln.get("path")) for ln in _list(cfg, "storage", "links") if isinstance(ln.get("path"), str)]
    for kind in ("files", "directories", "links"):
        for i, node in enumerate(_list(cfg, "storage", kind)):
            where = f"$.storage.{kind}.{i}"
            path = node.get("path")
            if not isinstance(path, str) or not path.startswith("/"):
                rep.error(f"{where}.path", "must be an absolute path", "path", value=path)
                continue
            if node.get("filesystem", ROOT_FS) != ROOT_FS:
                rep.error(f"{where}.filesystem", "only filesystem \"root\" can be converted (the MCO writes to the "
                          "root filesystem only)", "spec2-filesystem", value=node.get("filesystem"))
            under = next((ln for ln in links if _join(path).startswith(ln.rstrip("/") + "/")), None)
            if under:
                rep.error(f"{where}.path", f"is under the link {under} that this config writes; the conversion "
                          f"refuses that {_UPSTREAM}", "spec2-uses-link", value=path)
            if kind == "files":
                _check_file(node, where, rep)
    _check_duplicate_paths(cfg, rep)


def _check_file(node: Dict[str, Any], where: str, rep: _Report) -> None:
    mode = node.get("mode")
    if isinstance(mode, int) and not isinstance(mode, bool) and mode > 0o777:
        # helpers.go validateIgn2FileModes (bugzilla 2038240): no setuid/setgid/sticky.
        rep.error(f"{where}.mode", f"invalid mode {mode:#o}, cannot exceed 0o777 (as the MCO)", "mode", value=mode)
    if node.get("append") is True and node.get("overwrite") is True:
        rep.error(f"{where}.overwrite", "cannot set both append and overwrite to true", "append-overwrite")
    if "contents" in node and not isinstance(node["contents"], dict):
        rep.error(f"{where}.contents", "wrong type: expected object", "type")


def _check_duplicate_paths(cfg: Dict[str, Any], rep: _Report) -> None:
    # Files are deduplicated by path first (removeIgnDuplicateFilesUnitsUsers); what remains
    # must name each path once across files, directories and links (Check2_3).
    seen: Dict[str, str] = {}
    for kind in ("files", "directories", "links"):
        entries = _list(cfg, "storage", kind)
        last = {_join(str(e.get("path"))): i for i, e in enumerate(entries)} if kind == "files" else {}
        for i, node in enumerate(entries):
            if not isinstance(node.get("path"), str):
                continue
            path = _join(node["path"])
            if last.get(path, i) > i:
                continue  # a later file replaces this one
            if path in seen and not (kind == "files" and seen[path].startswith("$.storage.files.")):
                rep.error(f"$.storage.{kind}.{i}.path", f"{path} is also written by {seen[path]}; spec 3 allows one "
                          "entry per path", "spec2-duplicate", value=node["path"])
            seen.setdefault(path, f"$.storage.{kind}.{i}")


def _check_units(cfg: Dict[str, Any], rep: _Report) -> None:
    for i, unit in enumerate(_list(cfg, "systemd", "units")):
        if "enable" in unit:
            rep.error(f"$.systemd.units.{i}.enable", "deprecated in spec 2 and refused by the conversion (as "
                      "upstream); use enabled", "spec2-deprecated")
        seen = set()
        for k, dropin in enumerate(_dropins(unit)):
            name = _key(dropin.get("name"))
            if name in seen:
                rep.error(f"$.systemd.units.{i}.dropins.{k}.name", "duplicate drop-in name", "spec2-duplicate",
                          value=dropin.get("name"))
            seen.add(name)


# -- removeIgnDuplicateFilesUnitsUsers ------------------------------------------------------


def _dropins(unit: Dict[str, Any]) -> List[Dict[str, Any]]:
    """A unit's drop-ins; a null entry is Go's zero value (an empty drop-in), as it decodes it."""
    return [d if isinstance(d, dict) else {} for d in unit.get("dropins") or []]


def _key(value: Any) -> Any:
    """``value`` as a set member: a list or an object (a wrong type, refused elsewhere) by its text."""
    return value if not isinstance(value, (list, dict)) else (type(value).__name__, repr(value))


def _order(entries: List[Dict[str, Any]], key: Callable[[Dict[str, Any]], Any]) -> List[int]:
    """Indexes of the entries that survive, last first (the MCO walks from the end)."""
    seen, out = set(), []
    for i in range(len(entries) - 1, -1, -1):
        k = _key(key(entries[i]))
        if k not in seen:
            seen.add(k)
            out.append(i)
    return out


def _dedupe(cfg: Dict[str, Any], rep: _Report):
    files = _list(cfg, "storage", "files")
    files = [files[i] for i in _order(files, lambda f: f.get("path"))]
    units_in = _list(cfg, "systemd", "units")
    units: List[Dict[str, Any]] = []
    by_name: Dict[Any, Dict[str, Any]] = {}
    for i in range(len(units_in) - 1, -1, -1):
        unit = units_in[i]
        winner = by_name.get(_key(unit.get("name")))
        if winner is None:
            units.append(dict(unit, dropins=_dropins(unit)))
            by_name[_key(unit.get("name"))] = units[-1]
            continue
        have = {_key(d.get("name")) for d in winner["dropins"]}
        winner["dropins"].extend(d for d in _dropins(unit) if _key(d.get("name")) not in have)
    users = _list(cfg, "passwd", "users")
    if users:
        keys: List[str] = []
        for user in reversed(users):  # the newest user's keys first, then the older ones'
            keys.extend(str(k) for k in user.get("sshAuthorizedKeys") or [])
        unique = list(dict.fromkeys(keys))  # dedupePasswdUserSSHKeys keeps the first of each
        users = [dict(users[-1], sshAuthorizedKeys=unique)]
    return files, units, users


# -- v23tov30.Translate (then 3.0 -> 3.1 -> 3.2, which changes no field we emit) --------------


def _strp(value: Any) -> Any:
    return value if value not in (None, "") else None  # util.StrP: "" is unset


def _boolp(value: Any) -> Any:
    return True if value is True else None  # util.BoolP: false is unset


def _intp(value: Any) -> Any:
    return value if value not in (None, 0) else None  # util.IntP: 0 is unset


def _join(path: Any) -> str:
    # Go path.Join("/", p): cleaned, one leading slash (posixpath keeps a leading "//").
    cleaned = posixpath.normpath("/" + str(path))
    return "/" + cleaned.lstrip("/")


def _resource(ref: Dict[str, Any]) -> Dict[str, Any]:
    return {"source": ref.get("source", ""), "verification": {"hash": (ref.get("verification") or {}).get("hash")}}


def _ignition(ign: Dict[str, Any]) -> Dict[str, Any]:
    config = ign.get("config") or {}
    replace = config.get("replace")
    timeouts = ign.get("timeouts") or {}
    return {
        "version": TARGET_VERSION,
        "config": {"replace": _resource(replace) if isinstance(replace, dict) else None,
                   "merge": [_resource(r) for r in config.get("append") or [] if isinstance(r, dict)]},
        "security": {"tls": {"certificateAuthorities": [
            _resource(r) for r in ((ign.get("security") or {}).get("tls") or {}).get("certificateAuthorities") or []
            if isinstance(r, dict)]}},
        "timeouts": {"httpResponseHeaders": timeouts.get("httpResponseHeaders"),
                     "httpTotal": timeouts.get("httpTotal")},
    }


def _user(u: Dict[str, Any]) -> Dict[str, Any]:
    return {"name": u.get("name"), "passwordHash": u.get("passwordHash"),
            "sshAuthorizedKeys": list(u.get("sshAuthorizedKeys") or []), "uid": u.get("uid"),
            "gecos": _strp(u.get("gecos")), "homeDir": _strp(u.get("homeDir")),
            "noCreateHome": _boolp(u.get("noCreateHome")), "primaryGroup": _strp(u.get("primaryGroup")),
            "groups": list(u.get("groups") or []), "noUserGroup": _boolp(u.get("noUserGroup")),
            "noLogInit": _boolp(u.get("noLogInit")), "shell": _strp(u.get("shell")),
            "system": _boolp(u.get("system"))}


def _group(g: Dict[str, Any]) -> Dict[str, Any]:
    return {"name": g.get("name"), "gid": g.get("gid"), "passwordHash": _strp(g.get("passwordHash")),
            "system": _boolp(g.get("system"))}


def _unit(u: Dict[str, Any]) -> Dict[str, Any]:
    # "enabled" wins over the deprecated "enable" (refused above); an explicit false is kept.
    enabled = True if u.get("enabled") is True else (False if u.get("enabled") is False else None)
    return {"name": u.get("name"), "enabled": enabled, "mask": _boolp(u.get("mask")),
            "contents": _strp(u.get("contents")),
            "dropins": [{"name": d.get("name"), "contents": _strp(d.get("contents"))} for d in _dropins(u)]}


def _disk(d: Dict[str, Any]) -> Dict[str, Any]:
    parts = [{"label": p.get("label"), "number": p.get("number") or None, "sizeMiB": p.get("sizeMiB"),
              "startMiB": p.get("startMiB"), "typeGuid": _strp(p.get("typeGuid")), "guid": _strp(p.get("guid")),
              "wipePartitionEntry": _boolp(p.get("wipePartitionEntry")), "shouldExist": p.get("shouldExist")}
             for p in d.get("partitions") or [] if isinstance(p, dict)]
    return {"device": d.get("device"), "wipeTable": _boolp(d.get("wipeTable")), "partitions": parts}


def _raid(r: Dict[str, Any]) -> Dict[str, Any]:
    return {"name": r.get("name"), "level": r.get("level"), "devices": list(r.get("devices") or []),
            "spares": _intp(r.get("spares")), "options": list(r.get("options") or [])}


def _node(n: Dict[str, Any]) -> Dict[str, Any]:
    user, group = n.get("user") or {}, n.get("group") or {}
    return {"path": _join(n.get("path")), "user": {"id": user.get("id"), "name": _strp(user.get("name"))},
            "group": {"id": group.get("id"), "name": _strp(group.get("name"))}, "overwrite": n.get("overwrite")}


def _file(f: Dict[str, Any]) -> Dict[str, Any]:
    out = _node(f)
    if out["overwrite"] is None:
        out["overwrite"] = True  # spec 2 files overwrite by default
    contents = f.get("contents") or {}
    c = {"compression": _strp(contents.get("compression")), "source": contents.get("source", ""),
         "verification": {"hash": (contents.get("verification") or {}).get("hash")}}
    out["mode"] = f.get("mode")
    if f.get("append") is True:
        out["overwrite"] = False  # spec 3: overwrite must be false with append
        out["append"] = [c]
    else:
        out["contents"] = c
    return out


def _directory(d: Dict[str, Any]) -> Dict[str, Any]:
    return dict(_node(d), mode=d.get("mode"))


def _link(ln: Dict[str, Any]) -> Dict[str, Any]:
    return dict(_node(ln), hard=_boolp(ln.get("hard")), target=ln.get("target"))


def _prune(value: Any) -> Any:
    """What the MCO's JSON encoder (clarketm/json, omitempty) leaves: no unset pointer, no empty
    object or array. ``""`` and ``false`` stay: they are only here when the Go field keeps them."""
    if isinstance(value, dict):
        out = {k: _prune(v) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None and v != {} and v != []}
    if isinstance(value, list):
        return [_prune(v) for v in value]
    return value
