"""Semantic rules of the ``storage`` section: files, directories, links, disks, RAID, LUKS."""

import re
from typing import Dict, List, Tuple

from agent.ignition import spec
from agent.ignition.findings import entries_of, value_of
from agent.ignition.rules_base import RuleBase
from agent.ignition.values import path_error

FS_FORMATS = ("ext4", "btrfs", "xfs", "vfat", "swap")
LABEL_LIMITS = {"ext4": 16, "btrfs": 256, "xfs": 12, "swap": 15, "vfat": 11}
RAID_LEVELS = ("linear", "raid0", "0", "stripe", "raid1", "1", "mirror", "raid4", "4",
               "raid5", "5", "raid6", "6", "raid10", "10")
GUID_RE = re.compile(r"^(|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")


class StorageRules(RuleBase):
    # storage
    def storage(self, storage: dict) -> None:
        nodes: Dict[str, str] = {}
        links: Dict[str, bool] = {}
        entries: List[Tuple[str, str, str]] = []
        for section in ("files", "directories", "links"):
            for i, node in entries_of(storage, section):
                p = f"$.storage.{section}.{i}"
                path = value_of(node, "path", "str")
                if path is None:
                    self.r.error(p + ".path", "path not specified", "path-required")
                else:
                    err = path_error(path)
                    if err:
                        self.r.error(p + ".path", err[0], err[1], path)
                    elif path in nodes:
                        self.r.error(p + ".path", f"duplicate entry defined (also at {nodes[path]})", "duplicate", path)
                    else:
                        nodes[path] = p
                        entries.append((section, p, path))
                    if section == "links":
                        links[path] = bool(value_of(node, "hard", "bool"))
                for owner in ("user", "group"):
                    o = value_of(node, owner, "dict") or {}
                    if o.get("id") is not None and o.get("name") is not None:
                        self.r.error(f"{p}.{owner}", "cannot set both id and name", "owner-id-and-name")
                getattr(self, section[:-1] if section != "directories" else "directory")(node, p)
        symlinks = {p for p, hard in links.items() if not hard}
        for section, p, path in entries:
            parent = path
            while parent != "/":
                parent = parent.rsplit("/", 1)[0] or "/"
                if parent in symlinks:
                    what = {"files": "file", "directories": "directory", "links": "link"}[section]
                    self.r.error(p + ".path", f"{what} path includes link in config (link at {parent})",
                                 "path-through-link", path)
                    break
        self.filesystems(storage)
        self.disks(storage)
        self.raid(storage)
        self.luks(storage)

    def mode(self, node: dict, p: str) -> None:
        m = value_of(node, "mode", "int")
        if m is None:
            return
        if m < 0 or m > 0o7777:
            self.r.error(p + ".mode", "illegal file mode (a decimal integer 0..4095, e.g. 420 for 0644)",
                         "mode-range", m)
        elif m & 0o7000 and self.v < spec.V34:
            self.r.warn(p + ".mode", "setuid/setgid/sticky bits are not supported in spec versions older than "
                        "3.4.0", "mode-special", m)

    def file(self, node: dict, p: str) -> None:
        self.mode(node, p)
        contents = value_of(node, "contents", "dict") or {}
        if value_of(node, "overwrite", "bool") and contents.get("source") is None:
            self.r.error(p + ".overwrite", "overwrite must be false if source is unspecified",
                         "overwrite-nil-source")
        if contents:
            self.resource(contents, p + ".contents")
        for i, res in entries_of(node, "append"):
            self.resource(res, f"{p}.append.{i}")

    def directory(self, node: dict, p: str) -> None:
        self.mode(node, p)

    def link(self, node: dict, p: str) -> None:
        target = value_of(node, "target", "str")
        if not target:
            # 3.4+ allows omitting it only when the link is not to be (over)written
            if self.v < spec.V34 or value_of(node, "overwrite", "bool"):
                self.r.error(p + ".target", "link target is required", "link-target-required")
        if value_of(node, "hard", "bool"):
            if (value_of(node, "user", "dict") or value_of(node, "group", "dict")):
                self.r.warn(p, "user/group ignored for hard link", "hardlink-owner")
            if target and not target.startswith("/"):
                self.r.warn(p + ".target", "hard link target should be an absolute path", "hardlink-target")

    def device(self, node: dict, p: str, seen: Dict[str, int], i: int) -> None:
        """A disk or filesystem ``device``: required, a clean absolute path, unique in its list."""
        device = value_of(node, "device", "str")
        if not device:
            self.r.error(p + ".device", "disk device is required", "device-required")
            return
        err = path_error(device)
        if err:
            self.r.error(p + ".device", err[0], err[1], device)
        self.dup(seen, device, i, p + ".device")

    def filesystems(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, fs in entries_of(storage, "filesystems"):
            p = f"$.storage.filesystems.{i}"
            self.device(fs, p, seen, i)
            fmt = value_of(fs, "format", "str")
            formats = FS_FORMATS + (("none",) if self.v >= spec.V33 else ())
            if fmt and fmt not in formats:
                self.r.error(p + ".format", "invalid filesystem format (" + ", ".join(formats) + ")",
                             "filesystem-format", fmt)
            path = value_of(fs, "path", "str")
            if path:
                err = path_error(path)
                if err:
                    self.r.error(p + ".path", err[0], err[1], path)
            label = value_of(fs, "label", "str")
            if label is not None and not fmt:
                self.r.error(p + ".label", "filesystem must specify format if label is specified",
                             "label-needs-format")
            elif label and fmt in LABEL_LIMITS and len(label) > LABEL_LIMITS[fmt]:
                self.r.error(p + ".label", f"filesystem labels cannot be longer than {LABEL_LIMITS[fmt]} "
                             f"characters when using {fmt}", "label-too-long", label)
            others = any(fs.get(k) not in (None, [], "") for k in ("path", "uuid", "options", "mountOptions")) \
                or fs.get("wipeFilesystem") is True
            if not fmt and others:
                self.r.error(p + ".format", "format cannot be empty when path, label, uuid, wipeFilesystem, "
                             "options, or mountOptions is specified", "format-required")

    def disks(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, disk in entries_of(storage, "disks"):
            p = f"$.storage.disks.{i}"
            self.device(disk, p, seen, i)
            numbers: Dict[str, int] = {}
            labels: Dict[str, int] = {}
            for j, part in entries_of(disk, "partitions"):
                pp = f"{p}.partitions.{j}"
                label = value_of(part, "label", "str")
                if label is not None:
                    if len(label) > 36:
                        self.r.error(pp + ".label", "partition labels may not exceed 36 characters",
                                     "partition-label", label)
                    if ":" in label:
                        self.r.warn(pp + ".label", "partition label will be truncated to text before the colon",
                                    "partition-label-colon", label)
                    if label in labels:
                        self.r.error(pp + ".label", "cannot use the same partition label twice",
                                     "duplicate", label)
                    labels.setdefault(label, j)
                number = value_of(part, "number", "int") or 0
                if number < 0:
                    self.r.error(pp + ".number", "partition number must not be negative", "partition-number",
                                 number)
                if number > 0:
                    key = str(number)
                    if key in numbers:
                        self.r.error(pp + ".number", "partition numbers collide", "duplicate", number)
                    numbers.setdefault(key, j)
                for key in ("guid", "typeGuid"):
                    g = value_of(part, key, "str")
                    if g is not None and not GUID_RE.match(g):
                        self.r.error(f"{pp}.{key}", "doesn't match the form \"01234567-89AB-CDEF-EDCB-"
                                     "A98765432101\"", "guid", g)
                for key in ("sizeMiB", "startMiB"):
                    n = value_of(part, key, "int")
                    if n is not None and n < 0:
                        self.r.error(f"{pp}.{key}", "must not be negative", "partition-size", n)
                if part.get("shouldExist") is False:
                    others = [k for k in part if k not in ("number", "label", "shouldExist")
                              and part[k] is not None]
                    if others:
                        self.r.error(pp, "shouldExist specified false with other options also specified",
                                     "should-not-exist-with-others")

    def raid(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, raid in entries_of(storage, "raid"):
            p = f"$.storage.raid.{i}"
            self.dup(seen, value_of(raid, "name", "str"), i, p + ".name")
            level = value_of(raid, "level", "str")
            if level is None or level == "":
                self.r.error(p + ".level", "raid level is required", "raid-level")
            elif level not in RAID_LEVELS:
                self.r.error(p + ".level", "unrecognized raid level", "raid-level", level)
            elif (value_of(raid, "spares", "int") or 0) > 0 and level in ("linear", "raid0", "0", "stripe"):
                self.r.error(p + ".spares", "spares unsupported for linear and raid0 arrays", "raid-spares")
            if not value_of(raid, "devices", "list"):
                self.r.error(p + ".devices", "raid devices required", "raid-devices")
            for j, dev in enumerate(value_of(raid, "devices", "list") or []):
                if isinstance(dev, str):
                    err = path_error(dev)
                    if err:
                        self.r.error(f"{p}.devices.{j}", err[0], err[1], dev)

    def luks(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, luks in entries_of(storage, "luks"):
            p = f"$.storage.luks.{i}"
            name = value_of(luks, "name", "str")
            if name and "/" in name:
                self.r.error(p + ".name", "device names cannot contain slashes", "luks-name", name)
            self.dup(seen, name, i, p + ".name")
            device = value_of(luks, "device", "str")
            if device:
                err = path_error(device)
                if err:
                    self.r.error(p + ".device", err[0], err[1], device)
            label = value_of(luks, "label", "str")
            if label and len(label) > 47:
                self.r.error(p + ".label", "luks device labels cannot be longer than 47 characters",
                             "luks-label", label)
            key = value_of(luks, "keyFile", "dict")
            if key:
                self.resource(key, p + ".keyFile")
            clevis = value_of(luks, "clevis", "dict") or {}
            for j, tang in entries_of(clevis, "tang"):
                url = value_of(tang, "url", "str")
                if url:
                    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
                    if scheme not in ("http", "https"):
                        self.r.error(f"{p}.clevis.tang.{j}.url", "invalid url scheme", "url-scheme", url)
