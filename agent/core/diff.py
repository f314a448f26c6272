"""What differs between two node configs: the input of the disruption policy.

Pure functions of two ``NodeConfig`` values. Files, directories and links are matched by path
(a path that turns from a file into a link is one change of its ``kind``); units by name and
their drop-ins by name; ssh keys per user; OS-level fields one by one. Every list in the result
is sorted, so the same pair of configs always gives the same ``Changes`` (and the same plan).
"""

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError
from agent.ignition.dataurl import decode_data_url, decompress, unquote_valid

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"

# Ignition's defaults, so that an explicit default and an omitted field compare equal.
_DEFAULT_MODE = {"file": 0o644, "directory": 0o755}


@dataclass(frozen=True)
class FileChange:
    """A file, directory or link that was added, removed or changed (``fields`` says what)."""

    path: str
    kind: str  # "file" | "directory" | "link": the new kind, or the old one when removed
    change: str  # added | removed | changed
    fields: Tuple[str, ...] = ()
    # The contents before and after for content-aware rules such as registries.conf, left out
    # of to_dict(): given as bytes, or as the file entries (decoded only when asked, by
    # old_bytes()/new_bytes(): a plan of 50,000 files must not hold every file's bytes).
    old_data: Optional[bytes] = field(default=None, compare=False, repr=False)
    new_data: Optional[bytes] = field(default=None, compare=False, repr=False)
    old_entry: Optional[dict] = field(default=None, compare=False, repr=False)
    new_entry: Optional[dict] = field(default=None, compare=False, repr=False)

    def old_bytes(self) -> Optional[bytes]:
        """The decoded contents before, where a data: URL carries them (None otherwise)."""
        return self.old_data if self.old_data is not None else _file_data("file", self.old_entry)

    def new_bytes(self) -> Optional[bytes]:
        return self.new_data if self.new_data is not None else _file_data("file", self.new_entry)

    def to_dict(self) -> Dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "change": self.change, "fields": list(self.fields)}

    def describe(self) -> str:
        what = "" if self.kind == "file" else f" ({self.kind})"
        if self.change == CHANGED:
            return f"{self.path}{what} changed ({', '.join(self.fields)})"
        return f"{self.path}{what} {self.change}"


@dataclass(frozen=True)
class UnitChange:
    name: str
    change: str
    fields: Tuple[str, ...] = ()  # contents, enabled, mask, dropins
    dropins_added: Tuple[str, ...] = ()
    dropins_removed: Tuple[str, ...] = ()
    dropins_changed: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {
            "name": self.name,
            "change": self.change,
            "fields": list(self.fields),
            "dropins": {
                "added": list(self.dropins_added),
                "removed": list(self.dropins_removed),
                "changed": list(self.dropins_changed),
            },
        }

    def describe(self) -> str:
        if self.change != CHANGED:
            return f"unit {self.name} {self.change}"
        parts = [f for f in self.fields if f != "dropins"]
        for label, names in (("added", self.dropins_added), ("removed", self.dropins_removed),
                             ("changed", self.dropins_changed)):
            if names:
                parts.append(f"drop-in {', '.join(names)} {label}")
        return f"unit {self.name} changed ({'; '.join(parts)})"


@dataclass(frozen=True)
class SSHKeyChange:
    user: str
    added: Tuple[str, ...] = ()
    removed: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"user": self.user, "added": list(self.added), "removed": list(self.removed)}

    def describe(self) -> str:
        parts = []
        if self.added:
            parts.append(f"{len(self.added)} added")
        if self.removed:
            parts.append(f"{len(self.removed)} removed")
        return f"ssh keys of {self.user} changed ({', '.join(parts)})"


@dataclass(frozen=True)
class UserChange:
    """A user change other than ssh keys (password hash, groups, shell, a new user...)."""

    user: str
    change: str
    fields: Tuple[str, ...] = ()

    def to_dict(self) -> Dict[str, Any]:
        return {"user": self.user, "change": self.change, "fields": list(self.fields)}

    def describe(self) -> str:
        if self.change == CHANGED:
            return f"user {self.user} changed ({', '.join(self.fields)})"
        return f"user {self.user} {self.change}"


@dataclass(frozen=True)
class OSChange:
    field: str  # osImageURL, kernelArguments, kernelArguments.shouldExist, ..., kernelType, extensions, fips
    old: Any = None
    new: Any = None

    def to_dict(self) -> Dict[str, Any]:
        return {"field": self.field, "from": self.old, "to": self.new}

    def describe(self) -> str:
        return f"{self.field} changed"


@dataclass(frozen=True)
class Changes:
    files: Tuple[FileChange, ...] = ()
    units: Tuple[UnitChange, ...] = ()
    ssh_keys: Tuple[SSHKeyChange, ...] = ()
    users: Tuple[UserChange, ...] = ()
    os: Tuple[OSChange, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.files or self.units or self.ssh_keys or self.users or self.os)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "os": [c.to_dict() for c in self.os],
            "files": [c.to_dict() for c in self.files],
            "units": [c.to_dict() for c in self.units],
            "sshKeys": [c.to_dict() for c in self.ssh_keys],
            "users": [c.to_dict() for c in self.users],
        }


def diff(old: NodeConfig, new: NodeConfig) -> Changes:
    """Every difference between ``old`` and ``new`` that can matter to the node."""
    ssh, users = _diff_users(old.users, new.users)
    return Changes(
        files=_diff_paths(old, new),
        units=_diff_units(old.units, new.units),
        ssh_keys=ssh,
        users=users,
        os=_diff_os(old, new),
    )


# --- OS-level fields ---------------------------------------------------------------------------

def _ignition_kargs(cfg: NodeConfig, key: str) -> List[str]:
    kargs = cfg.ignition.get("kernelArguments") or {}
    return sorted(str(a) for a in (kargs.get(key) or []))


def _diff_os(old: NodeConfig, new: NodeConfig) -> Tuple[OSChange, ...]:
    out = []
    pairs = [
        ("osImageURL", old.os_image_url or "", new.os_image_url or ""),
        ("kernelArguments", list(old.kernel_arguments), list(new.kernel_arguments)),
        ("kernelArguments.shouldExist", _ignition_kargs(old, "shouldExist"), _ignition_kargs(new, "shouldExist")),
        ("kernelArguments.shouldNotExist", _ignition_kargs(old, "shouldNotExist"),
         _ignition_kargs(new, "shouldNotExist")),
        # "" and "default" both mean the default kernel
        ("kernelType", old.kernel_type or "default", new.kernel_type or "default"),
        ("extensions", sorted(set(old.extensions)), sorted(set(new.extensions))),
        ("fips", bool(old.fips), bool(new.fips)),
    ]
    for name, a, b in pairs:
        if a != b:
            out.append(OSChange(name, a, b))
    return tuple(out)


# --- files, directories, links -----------------------------------------------------------------

def _contents_key(contents: Any) -> Tuple[Any, Optional[bytes]]:
    """A comparable form of an Ignition ``contents`` / ``append`` item, plus its bytes if known."""
    if not isinstance(contents, dict) or not contents.get("source"):
        return ("none",), None
    source = contents["source"]
    compression = contents.get("compression") or ""
    if isinstance(source, str) and source[:5].lower() == "data:":
        try:
            data = decompress(decode_data_url(source), compression)
        except ConfigError:
            return ("url", source, compression), None  # undecodable: compare the text
        return ("data", data), data
    verification = (contents.get("verification") or {}).get("hash") or ""
    return ("url", source, compression, verification), None


def _owner_key(owner: Any) -> Tuple[str, Any]:
    owner = owner if isinstance(owner, dict) else {}
    if owner.get("id") is not None:
        return ("id", owner["id"])
    if owner.get("name"):
        return ("name", owner["name"])
    return ("id", 0)  # Ignition's default owner is root


def _changed_fields(kind: str, old: dict, new: dict) -> Tuple[str, ...]:
    """The fields that differ (mode or target and hard, user, group; then contents, append).
    Each field's comparable form is a function of its raw value alone, so equal raw values (the
    common case) are equal without computing it; contents are decoded only when their text
    differs (equal text is equal bytes), each side once."""
    if old.keys() == new.keys():  # usually, and then usually only "contents" differs
        raw = [k for k in old if old[k] != new[k]]
    else:
        raw = [k for k in old.keys() | new.keys() if old.get(k) != new.get(k)]
    fields = [k for k in (_LINK_KEYS if kind == "link" else _FILE_KEYS)
              if k in raw and _field(kind, k, old) != _field(kind, k, new)]
    if kind == "file":
        if "contents" in raw and _contents_differ(old.get("contents"), new.get("contents")):
            fields.append("contents")
        aa, ab = old.get("append") or [], new.get("append") or []
        if "append" in raw and aa != ab and [_contents_key(x)[0] for x in aa] != [_contents_key(x)[0] for x in ab]:
            fields.append("append")
    return tuple(fields)


def _contents_differ(ca: Any, cb: Any) -> bool:
    """``_contents_key(ca)[0] != _contents_key(cb)[0]``, cheaper: where both are plain data URLs
    (``_plain_data``), bytes that differ settle it without validating either URL (an invalid one
    compares by its text, which differs too); only equal bytes take the exact path."""
    if ca == cb:
        return False
    da, db = _plain_data(ca), _plain_data(cb)
    if da is not None and db is not None and da != db:
        return True
    return _contents_key(ca)[0] != _contents_key(cb)[0]


def _plain_data(contents: Any) -> Optional[bytes]:
    """The bytes of an uncompressed data URL, percent-encoded or standard base64 without "%",
    "-" or "_", decoded without validating the URL: for a valid URL the same bytes as
    ``decode_data_url``; for an invalid one anything (or None). None for every other source."""
    if type(contents) is not dict or contents.get("compression"):
        return None
    source = contents.get("source")
    if type(source) is not str or source[:5].lower() != "data:":
        return None
    comma = source.find(",", 5)
    if comma < 0:
        return None
    header, payload = source[5:comma], source[comma + 1:]
    try:
        if ";" not in header or header.rsplit(";", 1)[-1].strip().lower() != "base64":
            return unquote_valid(payload)
        if "%" in payload or "-" in payload or "_" in payload:
            return None
        compact = "".join(payload.split())
        return base64.b64decode(compact + "=" * (-len(compact) % 4), validate=True)
    except (ValueError, UnicodeError):  # a broken escape or base64: the exact path decides
        return None


_LINK_KEYS = ("target", "hard", "user", "group")
_FILE_KEYS = ("mode", "user", "group")


def _field(kind: str, key: str, entry: dict) -> Any:
    """One field's comparable form: Ignition's defaults filled in, owners as (id or name)."""
    if key in ("user", "group"):
        return _owner_key(entry.get(key))
    if key == "hard":
        return bool(entry.get("hard"))
    if key == "mode":
        mode = entry.get("mode")
        return _DEFAULT_MODE[kind] if mode is None else mode
    return entry.get(key)


def _index_paths(cfg: NodeConfig) -> Dict[str, Tuple[str, dict]]:
    out: Dict[str, Tuple[str, dict]] = {}
    for kind, entries in (("directory", cfg.directories), ("link", cfg.links), ("file", cfg.files)):
        # validation forbids duplicates; last wins
        out.update((e["path"], (kind, e)) for e in entries if isinstance(e, dict) and isinstance(e.get("path"), str))
    return out


def _file_data(kind: str, entry: Optional[dict]) -> Optional[bytes]:
    if entry is None or kind != "file":
        return None
    if entry.get("append"):
        return None  # the result depends on what is already on disk
    contents = entry.get("contents")
    if not isinstance(contents, dict) or not contents.get("source"):
        return b""
    return _contents_key(contents)[1]


def _diff_paths(old: NodeConfig, new: NodeConfig) -> Tuple[FileChange, ...]:
    a, b = _index_paths(old), _index_paths(new)
    out = []
    for path in sorted(a.keys() | b.keys()):
        was, now = a.get(path), b.get(path)
        if now is None:
            kind, entry = was
            out.append(FileChange(path, kind, REMOVED, old_entry=_file_entry(kind, entry)))
        elif was is None:
            kind, entry = now
            out.append(FileChange(path, kind, ADDED, new_entry=_file_entry(kind, entry)))
        elif was != now:
            (old_kind, old_entry), (new_kind, new_entry) = was, now
            if old_kind != new_kind:
                fields: Tuple[str, ...] = ("kind",)
            else:
                fields = _changed_fields(old_kind, old_entry, new_entry)
            if fields:
                out.append(FileChange(path, new_kind, CHANGED, fields, old_entry=_file_entry(old_kind, old_entry),
                                      new_entry=_file_entry(new_kind, new_entry)))
    return tuple(out)


def _file_entry(kind: str, entry: dict) -> Optional[dict]:
    return entry if kind == "file" else None


# --- units -------------------------------------------------------------------------------------

def _by_name(entries: Any) -> Dict[str, dict]:
    return {e["name"]: e for e in (entries or []) if isinstance(e, dict) and isinstance(e.get("name"), str)}


def _diff_units(old_units: list, new_units: list) -> Tuple[UnitChange, ...]:
    a, b = _by_name(old_units), _by_name(new_units)
    out = []
    for name in sorted(set(a) | set(b)):
        if name not in b:
            out.append(UnitChange(name, REMOVED))
            continue
        if name not in a:
            out.append(UnitChange(name, ADDED))
            continue
        ua, ub = a[name], b[name]
        fields = []
        if ua.get("contents") != ub.get("contents"):
            fields.append("contents")
        if ua.get("enabled") != ub.get("enabled"):
            fields.append("enabled")
        if bool(ua.get("mask")) != bool(ub.get("mask")):
            fields.append("mask")
        da, db = _by_name(ua.get("dropins")), _by_name(ub.get("dropins"))
        d_added = tuple(sorted(set(db) - set(da)))
        d_removed = tuple(sorted(set(da) - set(db)))
        d_changed = tuple(sorted(n for n in set(da) & set(db) if da[n].get("contents") != db[n].get("contents")))
        if d_added or d_removed or d_changed:
            fields.append("dropins")
        if fields:
            out.append(UnitChange(name, CHANGED, tuple(fields), d_added, d_removed, d_changed))
    return tuple(out)


# --- users -------------------------------------------------------------------------------------

def _keys(user: Optional[dict]) -> List[str]:
    keys = (user or {}).get("sshAuthorizedKeys") or []
    return [str(k).strip() for k in keys if str(k).strip()]


_KEY_FIELDS = {"name", "sshAuthorizedKeys"}


def _diff_users(old_users: list, new_users: list) -> Tuple[Tuple[SSHKeyChange, ...], Tuple[UserChange, ...]]:
    a, b = _by_name(old_users), _by_name(new_users)
    ssh, users = [], []
    for name in sorted(set(a) | set(b)):
        ua, ub = a.get(name), b.get(name)
        ka, kb = _keys(ua), _keys(ub)
        added = tuple(k for k in kb if k not in ka)
        removed = tuple(k for k in ka if k not in kb)
        if added or removed:
            ssh.append(SSHKeyChange(name, added, removed))
        others_a = {k: v for k, v in (ua or {}).items() if k not in _KEY_FIELDS and v not in (None, [], "")}
        others_b = {k: v for k, v in (ub or {}).items() if k not in _KEY_FIELDS and v not in (None, [], "")}
        if ua is None or ub is None:
            # A user that comes or goes with nothing but keys is a key change (as for "core").
            if others_a or others_b or not (added or removed):
                users.append(UserChange(name, ADDED if ua is None else REMOVED,
                                        tuple(sorted(others_b or others_a))))
            continue
        fields = tuple(sorted(k for k in set(others_a) | set(others_b) if others_a.get(k) != others_b.get(k)))
        if fields:
            users.append(UserChange(name, CHANGED, fields))
    return tuple(ssh), tuple(users)
