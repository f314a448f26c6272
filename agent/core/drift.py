"""On-disk drift (pure): what the current config laid down, compared with what is on disk.

The MCD validates the node's files and units against the rendered config it believes it runs,
on every start and before every update, and its config drift monitor does the same whenever a
watched file changes (machine-config-operator pkg/daemon/on_disk_validation.go
``validateOnDiskState``; pkg/daemon/config_drift_monitor.go). A difference marks the node
Degraded: "unexpected on-disk state validating against rendered-...: ...". We do the same, with
a few differences, each on purpose:

- What is checked. Files (type, mode, content; owner when the config names one), directories
  (type, mode, owner), links (a symbolic link's target; a hard link exists), unit files and
  dropins (content, mode 0644, owner root), masks (a link to ``/dev/null``), and unit
  enablement (the ``[Install]`` links of an enabled unit exist; a disabled unit has none).
  The MCD checks files' and units' content and mode only (``checkFileContentsAndMode``, which
  compares ``Lstat``'s mode, so a link in place of a file differs too), units' masks
  (on_disk_validation.go:88-100) and dropins (:50-71); it does not check owners, directories,
  links or enablement.
- Every difference is named, not the first one only: a report lists each drifted path and
  what differs (missing, type, mode, owner, link target, content, enablement).
- Content is compared by SHA-256 of the bytes, streamed from disk (the MCD reads the whole file
  and compares bytes). A non-secret file's report names both digests' first 12 hex digits; a
  secret's says only "content differs", as the MCD logs byte counts and never contents.
- Content the config does not hold is not compared: a file with no ``contents.source`` (kept as
  it is, as Ignition does), a file with ``append`` fragments (the MCD refuses those on day 2,
  :checkV3Files), and a remote source without a ``verification.hash``; their type, mode and
  owner still are.
- The MCD skips three files its certificate writer rewrites (``getFilesToIgnore``); nothing
  rewrites files behind node-agent's back, so none is skipped.
"""

import hashlib
import posixpath
from dataclasses import dataclass, field
from typing import Callable, Dict, Iterable, List, Optional, Tuple

from agent.core.applyplan.unitfiles import SYSTEM_DIR, install_links
from agent.core.nodeconfig import NodeConfig
from agent.core.secretfiles import file_mode, is_secret

DEFAULT_FILE_MODE = 0o644
DEFAULT_DIR_MODE = 0o755
DEV_NULL = "/dev/null"
DIGEST_SHOWN = 12  # hex digits of a digest a report shows (48 bits: enough to tell two apart)
REASON_PREFIX = "unexpected on-disk state validating against"  # the MCD's words (daemon.go)
FORCE_FILE = "/run/node-agent-force"  # as the MCD's /run/machine-config-daemon-force


@dataclass(frozen=True)
class Expected:
    """One path as the config laid it down. ``kind``: file, dir, symlink, hardlink, absent
    (an enablement link a disabled unit must not have)."""

    path: str
    kind: str
    where: str  # the config entry's JSON path
    mode: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    digest: Optional[Tuple[str, str]] = None  # (algorithm, hex) of the content, when known
    target: Optional[str] = None  # a symbolic link's target
    secret: bool = False
    unit: str = ""  # the unit an enablement link belongs to


@dataclass(frozen=True)
class Seen:
    """A path as it is. ``kind``: absent, file, dir, symlink, other; ``digest`` in the algorithm asked."""

    kind: str
    mode: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    size: Optional[int] = None
    digest: Optional[str] = None
    target: Optional[str] = None
    error: str = ""  # could not be read (named in the report)


@dataclass(frozen=True)
class Drift:
    path: str
    where: str
    differences: Tuple[str, ...]
    secret: bool = False

    def text(self) -> str:
        return f"{self.path}: {'; '.join(self.differences)}"

    def to_dict(self) -> Dict:
        return {"path": self.path, "where": self.where, "differences": list(self.differences),
                "secret": self.secret}


@dataclass(frozen=True)
class Expectation:
    """Everything a check compares, and the directories a watcher watches for it."""

    entries: Tuple[Expected, ...]
    config: str = ""
    unchecked_content: Tuple[str, ...] = ()  # files whose content the config does not hold
    disabled_units: Tuple[str, ...] = ()  # units that must have no enablement link at all

    @property
    def paths(self) -> List[str]:
        return [e.path for e in self.entries]

    def watch_dirs(self) -> List[str]:
        """The parent directory of every path (inotify does not recurse: the MCD watches the
        same, config_drift_monitor.go ``getDirPathsFromFilePaths``), plus /etc/systemd/system
        when a unit must stay disabled (a new ``*.wants`` directory appears there)."""
        dirs = {posixpath.dirname(e.path) for e in self.entries}
        if self.disabled_units:
            dirs.add(SYSTEM_DIR)
        return sorted(dirs)


ContentDigest = Callable[[int, dict], Optional[Tuple[str, str]]]
OwnerLookup = Callable[[str, str], Optional[int]]  # ("user" | "group", name) -> id


def sha256_hex(data: bytes) -> Tuple[str, str]:
    return "sha256", hashlib.sha256(data).hexdigest()


def content_digest(entry: dict) -> Optional[Tuple[str, str]]:
    """The digest of a file entry's content when the config holds it: an inline ``data:`` URL
    (decompressed), else a ``verification.hash`` of a remote source (sha256 or sha512; it covers
    the decompressed content, as Ignition checks it). None: not compared."""
    from agent.errors import ConfigError
    from agent.ignition.dataurl import decode_data_url, decompress

    if entry.get("append"):
        return None
    contents = entry.get("contents") or {}
    source = contents.get("source")
    if not isinstance(source, str):
        return None
    if source.startswith("data:"):
        try:
            return sha256_hex(decompress(decode_data_url(source), contents.get("compression")))
        except ConfigError:
            return None
    algo, _, value = str((contents.get("verification") or {}).get("hash") or "").partition("-")
    if algo in ("sha256", "sha512") and value:
        return algo, value.lower()
    return None


def _owner(entry: dict, lookup: OwnerLookup) -> Tuple[Optional[int], Optional[int]]:
    ids = []
    for key in ("user", "group"):
        ref = entry.get(key) or {}
        if ref.get("id") is not None:
            ids.append(int(ref["id"]))
        elif ref.get("name"):
            ids.append(lookup(key, ref["name"]))
        else:
            ids.append(None)
    return ids[0], ids[1]


def expectation(config: NodeConfig, lookup: OwnerLookup, unit_texts: Dict[str, Tuple[str, str]],
                digest: Optional[ContentDigest] = None) -> Expectation:
    """What ``config`` laid down. ``lookup`` resolves owner names (the root's passwd/group);
    ``unit_texts``: unit name -> (path, text) of units the config enables or disables without
    writing them (the vendor unit, for its ``[Install]`` section); ``digest``: content digests
    (index, entry) -> (algorithm, hex), by default ``content_digest``."""
    digest = digest or (lambda _i, entry: content_digest(entry))
    entries: List[Expected] = []
    unchecked: List[str] = []
    for i, d in enumerate(config.directories):
        uid, gid = _owner(d, lookup)
        mode = d.get("mode") if d.get("mode") is not None else DEFAULT_DIR_MODE
        entries.append(Expected(d["path"], "dir", f"$.storage.directories.{i}", mode=mode, uid=uid, gid=gid))
    for i, f in enumerate(config.files):
        uid, gid = _owner(f, lookup)
        mode = file_mode(f["path"], f.get("mode"))
        found = digest(i, f)
        if found is None:
            unchecked.append(f["path"])
        if mode is None and (f.get("contents") or {}).get("source") is not None:
            mode = DEFAULT_FILE_MODE  # the apply writes 0644; a file without a source keeps its mode
        entries.append(Expected(f["path"], "file", f"$.storage.files.{i}", mode=mode, uid=uid, gid=gid,
                                digest=found, secret=is_secret(f["path"], mode)))
    for i, ln in enumerate(config.links):
        # A link's owner is not compared: the apply does not set it (Ignition's default is root's).
        kind = "hardlink" if ln.get("hard") else "symlink"
        entries.append(Expected(ln["path"], kind, f"$.storage.links.{i}", target=ln.get("target")))
    units, disabled = _unit_entries(config, unit_texts)
    return Expectation(_last_wins(entries + units), config.name, tuple(unchecked), tuple(disabled))


def _unit_entries(config: NodeConfig, unit_texts: Dict[str, Tuple[str, str]]) -> Tuple[List[Expected], List[str]]:
    out: List[Expected] = []
    disabled: List[str] = []
    for i, u in enumerate(config.units):
        w, name = f"$.systemd.units.{i}", u["name"]
        unit_path = f"{SYSTEM_DIR}/{name}"
        if u.get("mask"):
            out.append(Expected(unit_path, "symlink", w, target=DEV_NULL))
        elif u.get("contents") is not None:
            out.append(Expected(unit_path, "file", w, mode=DEFAULT_FILE_MODE, uid=0, gid=0,
                                digest=sha256_hex(u["contents"].encode())))
        for k, d in enumerate(u.get("dropins") or []):
            if d.get("contents") is not None:
                out.append(Expected(f"{SYSTEM_DIR}/{name}.d/{d['name']}", "file", f"{w}.dropins.{k}",
                                    mode=DEFAULT_FILE_MODE, uid=0, gid=0, digest=sha256_hex(d["contents"].encode())))
        if u.get("mask") or u.get("enabled") is None:
            continue
        if u.get("contents") is not None:
            text, path = u["contents"], unit_path
        else:
            path, text = unit_texts.get(name, (unit_path, ""))
        if u["enabled"]:
            out.extend(Expected(link, "symlink", f"{w}.enabled", unit=name)
                       for link, _target in install_links(name, text, path))
        else:
            disabled.append(name)
    return out, disabled


def _last_wins(entries: Iterable[Expected]) -> Tuple[Expected, ...]:
    """One expectation per path: the last entry naming it (Ignition's order)."""
    by_path: Dict[str, Expected] = {}
    for e in entries:
        by_path.pop(e.path, None)
        by_path[e.path] = e
    return tuple(by_path.values())


def _octal(mode: Optional[int]) -> str:
    return "?" if mode is None else f"{mode:04o}"


_NAMES = {"file": "a regular file", "dir": "a directory", "symlink": "a symbolic link",
          "hardlink": "a regular file", "other": "a special file"}


def compare_one(e: Expected, seen: Seen) -> Tuple[str, ...]:
    """What differs between one expectation and what is on disk (empty: nothing)."""
    if seen.error:
        return (f"could not be read: {seen.error}",)
    if e.kind == "absent":
        return () if seen.kind == "absent" else (f"{e.unit} is enabled by this link; the config has it disabled",)
    if seen.kind == "absent":
        if e.unit:
            return (f"missing: {e.unit} is not enabled (the config enables it)",)
        return ("missing",)
    want_kind = "file" if e.kind == "hardlink" else e.kind
    if seen.kind != want_kind:
        return (f"is {_NAMES.get(seen.kind, seen.kind)}, expected {_NAMES[e.kind]}",)
    out: List[str] = []
    if e.kind == "symlink":
        if e.target is not None and seen.target != e.target:
            out.append(f"link target {seen.target}, expected {e.target}")
    elif e.mode is not None and seen.mode != e.mode:
        out.append(f"mode {_octal(seen.mode)}, expected {_octal(e.mode)}")
    if (e.uid is not None and seen.uid != e.uid) or (e.gid is not None and seen.gid != e.gid):
        want = f"{'-' if e.uid is None else e.uid}:{'-' if e.gid is None else e.gid}"
        out.append(f"owner {seen.uid}:{seen.gid}, expected {want}")
    if e.kind == "file" and e.digest is not None and seen.digest is not None and seen.digest != e.digest[1]:
        if e.secret:
            out.append("content differs")  # never a digest of a secret: it could confirm a guess
        else:
            algo = e.digest[0]
            out.append(f"content differs ({algo} {seen.digest[:DIGEST_SHOWN]}, expected {e.digest[1][:DIGEST_SHOWN]})")
    return tuple(out)


def compare(expect: Expectation, seen: Dict[str, Seen], stray_links: Dict[str, List[str]],
            only: Optional[Iterable[str]] = None) -> List[Drift]:
    """Every drifted path, in the config's order. ``seen``: path -> Seen for each expected path
    (a path not in it counts as not looked at); ``stray_links``: disabled unit -> enablement
    links found for it; ``only``: limit the check to these paths (a watcher's event)."""
    wanted = None if only is None else set(only)
    out: List[Drift] = []
    for e in expect.entries:
        if (wanted is not None and e.path not in wanted) or e.path not in seen:
            continue
        diffs = compare_one(e, seen[e.path])
        if diffs:
            out.append(Drift(e.path, e.where, diffs, e.secret))
    for unit in expect.disabled_units:
        for link in stray_links.get(unit, []):
            if wanted is None or link in wanted or posixpath.dirname(link) in wanted:
                out.append(Drift(link, "$.systemd.units", (f"{unit} is enabled by this link; "
                                                          "the config has it disabled",)))
    return out


def digests_wanted(expect: Expectation) -> Dict[str, str]:
    """path -> the algorithm to hash it with (only files whose content is compared)."""
    return {e.path: e.digest[0] for e in expect.entries if e.kind == "file" and e.digest is not None}


def reason(config_name: str, drifts: List[Drift], limit: int = 20, width: int = 160) -> str:
    """The report's reason: the MCD's first line, then one line per drifted path (at most
    ``limit``, each at most ``width`` characters), well within the server's 4096."""
    head = f"{REASON_PREFIX} {config_name or 'the current config'}: {len(drifts)} path" \
           f"{'' if len(drifts) == 1 else 's'} differ{'s' if len(drifts) == 1 else ''} from it"
    lines = [head]
    for d in drifts[:limit]:
        text = d.text()
        lines.append(text if len(text) <= width else text[:width - 1] + "…")
    if len(drifts) > limit:
        lines.append(f"... and {len(drifts) - limit} more (node-agent status on the node lists every one)")
    return "\n".join(lines)


def is_drift_reason(text: Optional[str]) -> bool:
    return bool(text) and str(text).startswith(REASON_PREFIX)


@dataclass
class DriftState:
    """What the last check found: the record ``node-agent status`` reads (``drift.json``)."""

    config: str
    checked_at: str
    drifts: List[Drift] = field(default_factory=list)
    unchecked_content: Tuple[str, ...] = ()

    def to_dict(self) -> Dict:
        return {"config": self.config, "checkedAt": self.checked_at,
                "drifted": [d.to_dict() for d in self.drifts],
                "uncheckedContent": len(self.unchecked_content)}


__all__ = ["Drift", "DriftState", "Expectation", "Expected", "Seen", "compare", "compare_one", "content_digest",
           "digests_wanted", "expectation", "is_drift_reason", "reason"]
