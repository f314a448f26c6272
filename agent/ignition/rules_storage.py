"""Semantic rules of the ``storage`` section: files, directories, links, disks, RAID, LUKS."""

import json
import re
from typing import Dict, List, Optional, Tuple

from agent.ignition import spec
from agent.ignition.findings import entries_of, value_of
from agent.ignition.rules_base import RuleBase
from agent.ignition.values import clean_path, path_error

FS_FORMATS = ("ext4", "btrfs", "xfs", "vfat", "swap")
LABEL_LIMITS = {"ext4": 16, "btrfs": 256, "xfs": 12, "swap": 15, "vfat": 11}
RAID_LEVELS = ("linear", "raid0", "0", "stripe", "raid1", "1", "mirror", "raid4", "4",
               "raid5", "5", "raid6", "6", "raid10", "10")
GUID_RE = re.compile(r"^(|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")


class StorageRules(RuleBase):
    def storage(self, storage: dict) -> None:
        # files, directories and links share one key (the path): Go visits the Storage struct's
        # fields in order (Directories, Files, Links: config/v3_*/types/schema.go), so of two
        # entries with one path the later in that order is the duplicate
        # (config/validate/validate.go ValidateDups, Storage.MergedKeys in storage.go)
        nodes: Dict[str, str] = {}
        for section in ("directories", "files", "links"):
            for i, node in entries_of(storage, section):
                p = f"$.storage.{section}.{i}"
                path = value_of(node, "path", "str")
                if not path:
                    self.r.error(p + ".path", "path not specified", "path-required")
                else:
                    err = path_error(path)
                    if err:
                        self.r.error(p + ".path", err[0], err[1], path)
                    if path in nodes:
                        self.r.error(p, f"duplicate entry defined (also at {nodes[path]})", "duplicate", path)
                    else:
                        nodes[path] = p
                for owner in ("user", "group"):
                    o = value_of(node, owner, "dict") or {}
                    if o.get("id") is not None and o.get("name") is not None:
                        self.r.error(f"{p}.{owner}", "cannot set both id and name", "owner-id-and-name")
                getattr(self, section[:-1] if section != "directories" else "directory")(node, p)
        self.through_links(storage)
        self.hard_links_to_directories(storage)
        self.filesystems(storage)
        self.disks(storage)
        self.raid(storage)
        self.luks(storage)

    def through_links(self, storage: dict) -> None:
        """A node under a link's path (hard or symbolic) is an error at the node
        (config/v3_*/types/storage.go validateDirectories/validateFiles/validateLinks: for every
        link, ``strings.HasPrefix(node.Path, link.Path+"/")``, whatever the paths are: relative,
        empty or not clean, which the path rule reports on its own). Go adds one error per
        matching link; the first one is reported here (same verdict, same paths, and bounded: a
        config of many links and many nodes under them must not make millions of findings).

        Linear in the node's path: each "/" of it is looked at once, and the text before it is
        looked up only when some link has that length."""
        links = {value_of(link, "path", "str") or "" for _, link in entries_of(storage, "links")}
        if not links:
            return
        lengths = {len(link) for link in links}
        for section, what in (("directories", "directory"), ("files", "file"), ("links", "link")):
            for i, node in entries_of(storage, section):
                path = value_of(node, "path", "str") or ""
                slash = path.find("/")
                while slash >= 0:
                    if slash in lengths and path[:slash] in links:
                        self.r.error(f"$.storage.{section}.{i}", f"{what} path includes link in config "
                                     f"(link at {path[:slash] or repr('')})", "path-through-link", path)
                        break
                    slash = path.find("/", slash + 1)

    def hard_links_to_directories(self, storage: dict) -> None:
        """A hard link whose target is a directory of this config (storage.go validateLinks: the
        target cleaned, a relative one joined to the link's own path, as Go's path.Join does)."""
        directories = {value_of(d, "path", "str") for _, d in entries_of(storage, "directories")}
        if not directories:
            return
        for i, link in entries_of(storage, "links"):
            target = value_of(link, "target", "str")
            if not value_of(link, "hard", "bool") or not target:
                continue
            resolved = clean_path(target) if target.startswith("/") else \
                clean_path((value_of(link, "path", "str") or "") + "/" + target)
            if resolved in directories:
                self.r.error(f"$.storage.links.{i}", f"hard link target is a directory ({resolved})",
                             "hardlink-to-directory", target)

    def mode(self, node: dict, p: str) -> None:
        m = value_of(node, "mode", "int")
        if m is None:
            return
        if m < 0 or m > 0o7777:
            self.r.error(p + ".mode", "illegal file mode (a decimal integer 0..4095, e.g. 420 for 0644)",
                         "mode-range", m)
        elif m & 0o7000 and self.v < spec.V36:
            # Ignition 2.22+ warns for every spec before 3.6.0 (docs/release-notes.md 2.22.0)
            self.r.warn(p + ".mode", "setuid/setgid/sticky bits are not supported or functional in spec "
                        "versions older than 3.6.0", "mode-special", m)

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
            # config/v3_*/types/storage_test.go: a link without a target, or with "", is refused
            self.r.error(p + ".target", "link target is required", "link-target-required")
        if value_of(node, "hard", "bool"):
            # storage.go validateLinks: a warning at each owner field a hard link sets
            for owner in ("user", "group"):
                for key in ("id", "name"):
                    if (value_of(node, owner, "dict") or {}).get(key) is not None:
                        self.r.warn(f"{p}.{owner}.{key}", "user/group ignored for hard link", "hardlink-owner")

    def device(self, node: dict, p: str, seen: Dict[str, int], i: int) -> bool:
        """A disk or filesystem ``device``: required, a clean absolute path, unique in its list."""
        device = value_of(node, "device", "str")
        if not device:
            self.r.error(p + ".device", "disk device is required", "device-required")
            return False
        err = path_error(device)
        if err:
            self.r.error(p + ".device", err[0], err[1], device)
        self.dup(seen, device, i, p + ".device")
        return True

    def filesystems(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        disks = {value_of(d, "device", "str"): d for _, d in entries_of(storage, "disks")}
        for i, fs in entries_of(storage, "filesystems"):
            p = f"$.storage.filesystems.{i}"
            self.device(fs, p, seen, i)
            disk = disks.get(value_of(fs, "device", "str"))
            if disk is not None:  # storage.go validateFilesystems
                if value_of(disk, "partitions", "list"):
                    self.r.warn(p + ".device", "filesystem overwrites partitioned device", "partitions-overwritten")
                elif not value_of(fs, "wipeFilesystem", "bool") and value_of(disk, "wipeTable", "bool"):
                    self.r.warn(p + ".device", "device is wiped (wipeTable) so the filesystem is created "
                                "anew, as if wipeFilesystem were true", "filesystem-implicit-wipe")
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
            if not self.device(disk, p, seen, i):
                continue  # Disk.Validate stops at a missing device (config/v3_*/types/disk.go)
            parts = entries_of(disk, "partitions")
            for j, part in parts:
                self.partition(part, f"{p}.partitions.{j}")
            self.partition_layout(parts, p)

    def partition(self, part: dict, pp: str) -> None:
        """config/v3_*/types/partition.go Partition.Validate."""
        if part.get("shouldExist") is False and (
                value_of(part, "typeGuid", "str") or value_of(part, "guid", "str")
                or value_of(part, "startMiB", "int") is not None or value_of(part, "sizeMiB", "int") is not None):
            self.r.error(pp, "shouldExist specified false with other options also specified (typeGuid, guid, "
                         "startMiB or sizeMiB)", "should-not-exist-with-others")
        label = value_of(part, "label", "str")
        if not value_of(part, "number", "int") and label is None:
            self.r.error(pp, "a partition number >= 1 or a label must be specified", "partition-number-or-label")
        if label is not None:
            if len(label.encode("utf-8", "surrogatepass")) > 36:  # Go's len() counts bytes
                self.r.error(pp + ".label", "partition labels may not exceed 36 characters",
                             "partition-label", label)
            elif ":" in label:
                self.r.error(pp + ".label", "partition label will be truncated to text before the colon",
                             "partition-label-colon", label)
        for key in ("guid", "typeGuid"):
            g = value_of(part, key, "str")
            if g is not None and not GUID_RE.match(g):
                self.r.error(f"{pp}.{key}", "doesn't match the form \"01234567-89AB-CDEF-EDCB-"
                             "A98765432101\"", "guid", g)

    def partition_layout(self, parts: List[Tuple[int, dict]], p: str) -> None:
        """The checks across a disk's partitions (config/v3_*/types/disk.go Disk.Validate and the
        generic duplicate-key check: a partition's key is its number, else its label)."""
        numbers: Dict[int, int] = {}
        labels: Dict[str, int] = {}
        keys: Dict[str, int] = {}
        for j, part in parts:
            number = value_of(part, "number", "int") or 0
            label = value_of(part, "label", "str")
            if number:
                if number in numbers:
                    self.r.error(f"{p}.partitions.{j}", "partition numbers collide", "duplicate", number)
                numbers.setdefault(number, j)
            if label is not None:
                if label in labels:
                    self.r.error(f"{p}.partitions.{j}", "cannot use the same partition label twice",
                                 "duplicate", label)
                labels.setdefault(label, j)
            key = f"number:{number}" if number else f"label:{label}" if label is not None else ""
            if key in keys:
                self.r.error(f"{p}.partitions.{j}", "duplicate entry defined", "duplicate")
            keys.setdefault(key, j)
        overlap = _overlapping(parts)
        if overlap is not None:
            self.r.error(f"{p}.partitions.{overlap}", "partitions overlap", "partitions-overlap")
        # no "shouldExist false beside a size-0 partition" check: Ignition accepts that layout
        # (tests/positive/partitions/complex-mb.go); its disks stage decides at run time

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
            if not device:
                # config/v3_*/types/luks.go Luks.Validate: ErrDiskDeviceRequired
                self.r.error(p + ".device", "disk device is required", "device-required")
            else:
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
                # tang.go validateTangURL: url.Parse, then the scheme must be http or https
                # (an empty or missing url has no scheme)
                url = value_of(tang, "url", "str") or ""
                if not _is_http_url(url):
                    self.r.error(f"{p}.clevis.tang.{j}.url", "invalid url scheme (tang needs http or https)",
                                 "url-scheme", url)
                if not value_of(tang, "thumbprint", "str"):
                    self.r.error(f"{p}.clevis.tang.{j}.thumbprint", "thumbprint is required", "tang-thumbprint")
                advertisement = value_of(tang, "advertisement", "str")
                if advertisement and not _is_json(advertisement):
                    self.r.error(f"{p}.clevis.tang.{j}.advertisement", "advertisement is not valid JSON",
                                 "tang-advertisement")
            custom = value_of(clevis, "custom", "dict") or {}
            if value_of(custom, "pin", "str") and (entries_of(clevis, "tang") or value_of(clevis, "tpm2", "bool")
                                                   or value_of(clevis, "threshold", "int")):
                self.r.error(f"{p}.clevis", "cannot use custom clevis config with tpm2, tang, or threshold",
                             "clevis-custom-with-others")
            self.clevis_custom(custom, f"{p}.clevis.custom")

    def clevis_custom(self, custom: dict, p: str) -> None:
        """clevis.go ClevisCustom.Validate: once anything is set, pin and config are required;
        before 3.6.0 the pin must be tpm2, tang or sss (3.6.0 accepts any pin: release notes 2.25.0)."""
        pin, config = value_of(custom, "pin", "str"), value_of(custom, "config", "str")
        if not pin and not config and not value_of(custom, "needsNetwork", "bool"):
            return
        if not pin:
            self.r.error(p + ".pin", "clevis pin is required", "clevis-pin")
        elif self.v < spec.V36 and pin not in ("tpm2", "tang", "sss"):
            self.r.error(p + ".pin", "unknown clevis pin (tpm2, tang or sss before spec 3.6.0)", "clevis-pin", pin)
        if not config:
            self.r.error(p + ".config", "clevis config is required", "clevis-config")


def _overlapping(parts: List[Tuple[int, dict]]) -> Optional[int]:
    """Index of a partition overlapping another one with explicit start and size (disk.go
    partitionsOverlap: a start of 0 is placed by sgdisk and a size of 0 fills, so not checked)."""
    sized = []
    for j, part in parts:
        start, size = value_of(part, "startMiB", "int"), value_of(part, "sizeMiB", "int")
        if start is not None and size is not None and start != 0:
            sized.append((j, start, start if size == 0 else start + size - 1))
    for a, (_, start, end) in enumerate(sized):
        for b, (j, o_start, o_end) in enumerate(sized):
            if a == b:
                continue
            if o_start <= start <= o_end or o_start <= end <= o_end or (start < o_start and end > o_end):
                return j
    return None


def _is_http_url(url: str) -> bool:
    scheme, colon, _ = url.partition(":")
    return bool(colon) and scheme.lower() in ("http", "https")


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
