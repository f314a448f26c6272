"""Validate an Ignition 3.0.0 .. 3.5.0 config the way Ignition does, with JSON paths.

Two passes over the document: a structural one driven by ``spec.TYPES`` (JSON types, unknown
keys and keys the declared version lacks: warnings, "unused key", as Ignition reports them),
then the semantic rules of coreos/ignition's config/v3_*/types validators. Messages follow
Ignition's own wording where it has one, so users can search for them.
"""

import re
from typing import Any, Dict, List, Optional, Tuple
from urllib.parse import parse_qs

from agent.errors import ConfigError, Problem
from agent.ignition import spec
from agent.ignition.dataurl import decode_data_url

UNIT_SUFFIXES = (".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target",
                 ".path", ".timer", ".snapshot", ".slice", ".scope")
FS_FORMATS = ("ext4", "btrfs", "xfs", "vfat", "swap")
LABEL_LIMITS = {"ext4": 16, "btrfs": 256, "xfs": 12, "swap": 15, "vfat": 11}
RAID_LEVELS = ("linear", "raid0", "0", "stripe", "raid1", "1", "mirror", "raid4", "4",
               "raid5", "5", "raid6", "6", "raid10", "10")
GUID_RE = re.compile(r"^(|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
HASH_SIZES = {"sha512": 64, "sha256": 32}
SYSTEMD_LINE_MAX = 2048
_MISSING = object()


class _Report:
    def __init__(self) -> None:
        self.problems: List[Problem] = []

    def error(self, path: str, message: str, rule: str, value: Any = _MISSING) -> None:
        self._add(path, message, rule, "error", value)

    def warn(self, path: str, message: str, rule: str, value: Any = _MISSING) -> None:
        self._add(path, message, rule, "warning", value)

    def _add(self, path: str, message: str, rule: str, severity: str, value: Any) -> None:
        if value is _MISSING:
            self.problems.append(Problem(path, message, rule=rule, severity=severity))
        else:
            self.problems.append(Problem(path, message, rule=rule, severity=severity, value=value))


def validate_ignition(doc: Any) -> List[Problem]:
    """Every problem of ``doc`` (errors and warnings), each anchored at its JSON path."""
    r = _Report()
    if not isinstance(doc, dict):
        r.error("$", f"an Ignition config must be a JSON object, not {_type_name(doc)}", "type")
        return r.problems
    version = _check_version(doc, r)
    declared = version if version else spec.parse_version(spec.NEWEST_VERSION)
    _walk(doc, "Config", "$", declared, version is not None, r)
    _Semantic(declared, r).config(doc)
    return r.problems


def errors_of(problems: List[Problem]) -> List[Problem]:
    return [p for p in problems if p.is_error]


def check_ignition(doc: Any, source: str = "") -> List[Problem]:
    """validate_ignition, raising ConfigError when there is any error."""
    problems = validate_ignition(doc)
    errs = errors_of(problems)
    if errs:
        raise ConfigError(f"invalid Ignition config ({len(errs)} error{'s' if len(errs) > 1 else ''})",
                          problems=problems, source=source)
    return problems


# -- version -----------------------------------------------------------------------------------

def _check_version(doc: dict, r: _Report) -> Optional[spec.Version]:
    ign = doc.get("ignition")
    path = "$.ignition.version"
    if ign is None or (isinstance(ign, dict) and ign.get("version") is None):
        r.error(path, "config version is required (e.g. \"3.4.0\")", "version-missing")
        return None
    if not isinstance(ign, dict):
        return None  # the structural pass reports the type
    text = ign["version"]
    if not isinstance(text, str):
        return None
    v = spec.parse_version(text)
    if v is None:
        r.error(path, "invalid config version (couldn't parse)", "version-invalid", text)
        return None
    if v[0] < 3:
        r.error(path, f"spec {text} is a {v[0]}.x config, which is not supported: translate it to spec 3.x "
                "(e.g. with ign-converter, or rewrite it in Butane)", "version-2x", text)
        return None
    if text not in spec.SUPPORTED_VERSIONS:
        r.error(path, "unsupported config version; supported: " + ", ".join(spec.SUPPORTED_VERSIONS),
                "version-unsupported", text)
        return None
    return v


# -- structure ---------------------------------------------------------------------------------

def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


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


def _walk(value: dict, type_name: str, path: str, declared: spec.Version, strict: bool, r: _Report) -> None:
    fields = spec.TYPES[type_name]
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


def _walk_kind(value: Any, kind: Any, path: str, declared: spec.Version, strict: bool, r: _Report) -> None:
    if not _matches(value, kind):
        r.error(path, f"wrong type: expected {_kind_name(kind)}, got {_type_name(value)}", "type", value
                if not isinstance(value, (dict, list)) else _MISSING)
        return
    if isinstance(kind, tuple) and kind[0] == "object":
        _walk(value, kind[1], path, declared, strict, r)
    elif isinstance(kind, tuple) and kind[0] == "list":
        for i, item in enumerate(value):
            if item is None and not isinstance(kind[1], tuple):
                r.error(f"{path}.{i}", f"wrong type: expected {_kind_name(kind[1])}, got null", "type")
                continue
            if item is None:
                continue
            _walk_kind(item, kind[1], f"{path}.{i}", declared, strict, r)


# -- values ------------------------------------------------------------------------------------

def _get(d: Any, key: str, kind: str) -> Any:
    """d[key] when it is of ``kind`` (type errors are reported by the structural pass)."""
    if not isinstance(d, dict):
        return None
    v = d.get(key)
    if v is None:
        return None
    if kind == "str" and isinstance(v, str):
        return v
    if kind == "bool" and isinstance(v, bool):
        return v
    if kind == "int" and isinstance(v, int) and not isinstance(v, bool):
        return v
    if kind == "dict" and isinstance(v, dict):
        return v
    if kind == "list" and isinstance(v, list):
        return v
    return None


def _items(d: Any, key: str) -> List[Tuple[int, dict]]:
    return [(i, x) for i, x in enumerate(_get(d, key, "list") or []) if isinstance(x, dict)]


def clean_path(p: str) -> str:
    """Go's path.Clean for an absolute path."""
    stack: List[str] = []
    for part in p.split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            if stack:
                stack.pop()
            continue
        stack.append(part)
    return "/" + "/".join(stack)


def path_error(p: str) -> Optional[Tuple[str, str]]:
    if not p.startswith("/"):
        return "path not absolute", "path-absolute"
    if clean_path(p) != p:
        return "path is not fully simplified (no '..', '.', '//' or trailing '/')", "path-clean"
    return None


_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
_BAD_ESCAPE_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")


def url_error(url: str, declared: spec.Version) -> Optional[Tuple[str, str]]:
    """Why Ignition would refuse ``url`` as a source, or None. ``""`` is fine (empty contents)."""
    if url == "":
        return None
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in url):
        return "unable to parse url (control character)", "url-invalid"
    if url.startswith(":"):
        return "unable to parse url (missing scheme)", "url-invalid"
    m = _SCHEME_RE.match(url)
    scheme = m.group(1).lower() if m else ""
    rest = url[m.end():] if m else url
    if scheme != "data":
        before_query = rest.split("?", 1)[0].split("#", 1)[0]
        if _BAD_ESCAPE_RE.search(before_query):
            return "unable to parse url (invalid %-escape)", "url-invalid"
        if rest.startswith("//"):
            host = rest[2:].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
            hostport = host.rsplit("@", 1)[-1]
            if " " in hostport:
                return "unable to parse url (space in host)", "url-invalid"
            if hostport.startswith("["):
                if "]" not in hostport:
                    return "unable to parse url (unclosed IPv6 bracket)", "url-invalid"
                port = hostport.split("]", 1)[1]
                if port and (not port.startswith(":") or not port[1:].isdigit() and port != ":"):
                    return "unable to parse url (invalid port)", "url-invalid"
            elif ":" in hostport:
                port = hostport.rsplit(":", 1)[1]
                if port and not port.isdigit():
                    return "unable to parse url (invalid port)", "url-invalid"
    allowed = {"http", "https", "tftp", "s3", "data", "oem"}
    if declared >= spec.V32:
        allowed.add("gs")
    if declared >= spec.V34:
        allowed.add("arn")
    if scheme not in allowed:
        hint = ""
        since = spec.SOURCE_SCHEME_SINCE.get(scheme)
        if since:
            hint = f" ({scheme} needs spec {spec.version_text(since)})"
        return f"invalid url scheme {scheme or '(none)'!r}{hint}; use http, https, tftp, s3, gs, arn, data", \
            "url-scheme"
    if scheme in ("s3", "arn"):
        query = rest.split("?", 1)[1].split("#", 1)[0] if "?" in rest else ""
        if "versionId" in parse_qs(query, keep_blank_values=True):
            values = parse_qs(query, keep_blank_values=True)["versionId"]
            if not values or values[0] == "":
                return "invalid S3 object VersionId", "s3-version-id"
    if scheme == "arn" and not _valid_s3_arn(url.split("?", 1)[0]):
        return "invalid S3 ARN format", "s3-arn"
    if scheme == "data":
        try:
            decode_data_url(url)
        except ConfigError as exc:
            return str(exc), "data-url"
    return None


def _valid_s3_arn(text: str) -> bool:
    parts = text.split(":", 5)
    if len(parts) < 6 or parts[0] != "arn" or parts[2] != "s3":
        return False
    resource = parts[5]
    slashes = text.split("/")
    if resource.startswith("accesspoint/"):
        return len(slashes) >= 3
    return len(slashes) >= 2


def hash_error(value: str, declared: spec.Version) -> Optional[Tuple[str, str]]:
    function, dash, digest = value.partition("-")
    if not dash:
        return "malformed hash specifier (expected sha512-<hex>)", "hash-malformed"
    since = spec.HASH_FUNCTION_SINCE.get(function)
    if since is None or since > declared:
        extra = f" ({function} needs spec {spec.version_text(since)})" if since else ""
        return f"unrecognized hash function {function!r}{extra}", "hash-function"
    try:
        raw = bytes.fromhex(digest) if len(digest) % 2 == 0 and " " not in digest else None
    except ValueError:
        raw = None
    if raw is None:
        return "malformed hash specifier (digest is not hexadecimal)", "hash-malformed"
    if len(raw) != HASH_SIZES[function]:
        return (f"incorrect size for hash sum ({function} needs {HASH_SIZES[function] * 2} hex digits, "
                f"got {len(digest)})"), "hash-size"
    return None


def unit_contents_error(text: str) -> Optional[str]:
    """A parse error as go-systemd's unit deserializer would report, or None."""
    continued = False
    for n, raw in enumerate(text.splitlines(), 1):
        if len(raw) >= SYSTEMD_LINE_MAX:
            return f"line {n} is too long (systemd allows {SYSTEMD_LINE_MAX - 1} characters)"
        line = raw.strip()
        if continued:
            continued = line.endswith("\\")
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                return f"line {n}: unable to find end of section header"
            continue
        if "=" not in line:
            return f"line {n}: expected KEY=VALUE, a [Section] or a comment"
        continued = line.endswith("\\")
    return None


def has_install_section(text: str) -> bool:
    return any(line.strip() == "[Install]" for line in text.splitlines())


# -- semantic rules ----------------------------------------------------------------------------

class _Semantic:
    def __init__(self, declared: spec.Version, r: _Report):
        self.v = declared
        self.r = r

    def config(self, doc: dict) -> None:
        ign = _get(doc, "ignition", "dict") or {}
        self.ignition(ign)
        storage = _get(doc, "storage", "dict") or {}
        systemd = _get(doc, "systemd", "dict") or {}
        passwd = _get(doc, "passwd", "dict") or {}
        self.storage(storage)
        self.systemd(systemd)
        self.passwd(passwd)
        self.kernel_arguments(_get(doc, "kernelArguments", "dict") or {})
        self.systemd_conflicts(storage, systemd)

    # ignition section
    def ignition(self, ign: dict) -> None:
        cfg = _get(ign, "config", "dict") or {}
        seen: Dict[str, int] = {}
        for i, res in _items(cfg, "merge"):
            p = f"$.ignition.config.merge.{i}"
            self.required_source(res, p)
            self.resource(res, p)
            self.dup(seen, _get(res, "source", "str"), i, p + ".source")
        replace = _get(cfg, "replace", "dict")
        if replace:
            self.resource(replace, "$.ignition.config.replace")
        tls = _get(_get(ign, "security", "dict"), "tls", "dict") or {}
        seen = {}
        for i, res in _items(tls, "certificateAuthorities"):
            p = f"$.ignition.security.tls.certificateAuthorities.{i}"
            self.required_source(res, p)
            self.resource(res, p)
            self.dup(seen, _get(res, "source", "str"), i, p + ".source")
        timeouts = _get(ign, "timeouts", "dict") or {}
        for key in ("httpResponseHeaders", "httpTotal"):
            t = _get(timeouts, key, "int")
            if t is not None and t < 0:
                self.r.error(f"$.ignition.timeouts.{key}", "timeout must not be negative", "timeout-negative", t)
        proxy = _get(ign, "proxy", "dict") or {}
        for key in ("httpProxy", "httpsProxy"):
            url = _get(proxy, key, "str")
            if url:
                scheme = url.split(":", 1)[0].lower() if ":" in url else ""
                if scheme not in ("http", "https"):
                    self.r.error(f"$.ignition.proxy.{key}", "proxies must be http(s)", "proxy-scheme", url)

    def required_source(self, res: dict, path: str) -> None:
        if not _get(res, "source", "str"):
            self.r.error(path + ".source", "source is required", "source-required")

    def resource(self, res: dict, path: str) -> None:
        compression = _get(res, "compression", "str")
        if compression not in (None, "", "gzip"):
            self.r.error(path + ".compression", "invalid compression method (only \"gzip\" or none)",
                         "compression-invalid", compression)
        source = _get(res, "source", "str")
        verification = _get(res, "verification", "dict") or {}
        hash_value = _get(verification, "hash", "str")
        if verification.get("hash") is not None and res.get("source") is None:
            self.r.error(path + ".verification.hash", "source must be specified if verification is specified",
                         "verification-nil-source")
        if hash_value is not None:
            err = hash_error(hash_value, self.v)
            if err:
                self.r.error(path + ".verification.hash", err[0], err[1], hash_value)
        if source is not None:
            err = url_error(source, self.v)
            if err:
                self.r.error(path + ".source", err[0], err[1], source if len(source) < 120 else source[:117] + "...")
        headers = _items(res, "httpHeaders")
        if headers:
            scheme = source.split(":", 1)[0].lower() if source and ":" in source else ""
            if not source:
                self.r.error(path + ".httpHeaders", "unable to parse url: HTTP headers need a source",
                             "httpheaders-source")
            elif scheme not in ("http", "https"):
                self.r.error(path + ".httpHeaders", "cannot use HTTP headers with this source scheme",
                             "httpheaders-scheme", scheme)
            names: Dict[str, int] = {}
            for i, h in headers:
                name = _get(h, "name", "str")
                hp = f"{path}.httpHeaders.{i}"
                if not name:
                    self.r.error(hp + ".name", "HTTP header name can't be empty", "httpheader-name")
                    continue
                self.dup(names, name, i, hp + ".name")

    def dup(self, seen: Dict[str, int], key: Optional[str], index: int, path: str, what: str = "") -> None:
        if key is None:
            return
        if key in seen:
            self.r.error(path, f"duplicate entry defined (same as entry {seen[key]}{what})", "duplicate", key)
        else:
            seen[key] = index

    # storage
    def storage(self, storage: dict) -> None:
        nodes: Dict[str, str] = {}
        links: Dict[str, bool] = {}
        entries: List[Tuple[str, str, str]] = []
        for section in ("files", "directories", "links"):
            for i, node in _items(storage, section):
                p = f"$.storage.{section}.{i}"
                path = _get(node, "path", "str")
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
                        links[path] = bool(_get(node, "hard", "bool"))
                for owner in ("user", "group"):
                    o = _get(node, owner, "dict") or {}
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
        m = _get(node, "mode", "int")
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
        contents = _get(node, "contents", "dict") or {}
        if _get(node, "overwrite", "bool") and contents.get("source") is None:
            self.r.error(p + ".overwrite", "overwrite must be false if source is unspecified",
                         "overwrite-nil-source")
        if contents:
            self.resource(contents, p + ".contents")
        for i, res in _items(node, "append"):
            self.resource(res, f"{p}.append.{i}")

    def directory(self, node: dict, p: str) -> None:
        self.mode(node, p)

    def link(self, node: dict, p: str) -> None:
        target = _get(node, "target", "str")
        if not target:
            # 3.4+ allows omitting it only when the link is not to be (over)written
            if self.v < spec.V34 or _get(node, "overwrite", "bool"):
                self.r.error(p + ".target", "link target is required", "link-target-required")
        if _get(node, "hard", "bool"):
            if (_get(node, "user", "dict") or _get(node, "group", "dict")):
                self.r.warn(p, "user/group ignored for hard link", "hardlink-owner")
            if target and not target.startswith("/"):
                self.r.warn(p + ".target", "hard link target should be an absolute path", "hardlink-target")

    def device(self, node: dict, p: str, seen: Dict[str, int], i: int) -> None:
        """A disk or filesystem ``device``: required, a clean absolute path, unique in its list."""
        device = _get(node, "device", "str")
        if not device:
            self.r.error(p + ".device", "disk device is required", "device-required")
            return
        err = path_error(device)
        if err:
            self.r.error(p + ".device", err[0], err[1], device)
        self.dup(seen, device, i, p + ".device")

    def filesystems(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, fs in _items(storage, "filesystems"):
            p = f"$.storage.filesystems.{i}"
            self.device(fs, p, seen, i)
            fmt = _get(fs, "format", "str")
            formats = FS_FORMATS + (("none",) if self.v >= spec.V33 else ())
            if fmt and fmt not in formats:
                self.r.error(p + ".format", "invalid filesystem format (" + ", ".join(formats) + ")",
                             "filesystem-format", fmt)
            path = _get(fs, "path", "str")
            if path:
                err = path_error(path)
                if err:
                    self.r.error(p + ".path", err[0], err[1], path)
            label = _get(fs, "label", "str")
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
        for i, disk in _items(storage, "disks"):
            p = f"$.storage.disks.{i}"
            self.device(disk, p, seen, i)
            numbers: Dict[str, int] = {}
            labels: Dict[str, int] = {}
            for j, part in _items(disk, "partitions"):
                pp = f"{p}.partitions.{j}"
                label = _get(part, "label", "str")
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
                number = _get(part, "number", "int") or 0
                if number < 0:
                    self.r.error(pp + ".number", "partition number must not be negative", "partition-number",
                                 number)
                if number > 0:
                    key = str(number)
                    if key in numbers:
                        self.r.error(pp + ".number", "partition numbers collide", "duplicate", number)
                    numbers.setdefault(key, j)
                for key in ("guid", "typeGuid"):
                    g = _get(part, key, "str")
                    if g is not None and not GUID_RE.match(g):
                        self.r.error(f"{pp}.{key}", "doesn't match the form \"01234567-89AB-CDEF-EDCB-"
                                     "A98765432101\"", "guid", g)
                for key in ("sizeMiB", "startMiB"):
                    n = _get(part, key, "int")
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
        for i, raid in _items(storage, "raid"):
            p = f"$.storage.raid.{i}"
            self.dup(seen, _get(raid, "name", "str"), i, p + ".name")
            level = _get(raid, "level", "str")
            if level is None or level == "":
                self.r.error(p + ".level", "raid level is required", "raid-level")
            elif level not in RAID_LEVELS:
                self.r.error(p + ".level", "unrecognized raid level", "raid-level", level)
            elif (_get(raid, "spares", "int") or 0) > 0 and level in ("linear", "raid0", "0", "stripe"):
                self.r.error(p + ".spares", "spares unsupported for linear and raid0 arrays", "raid-spares")
            if not _get(raid, "devices", "list"):
                self.r.error(p + ".devices", "raid devices required", "raid-devices")
            for j, dev in enumerate(_get(raid, "devices", "list") or []):
                if isinstance(dev, str):
                    err = path_error(dev)
                    if err:
                        self.r.error(f"{p}.devices.{j}", err[0], err[1], dev)

    def luks(self, storage: dict) -> None:
        seen: Dict[str, int] = {}
        for i, luks in _items(storage, "luks"):
            p = f"$.storage.luks.{i}"
            name = _get(luks, "name", "str")
            if name and "/" in name:
                self.r.error(p + ".name", "device names cannot contain slashes", "luks-name", name)
            self.dup(seen, name, i, p + ".name")
            device = _get(luks, "device", "str")
            if device:
                err = path_error(device)
                if err:
                    self.r.error(p + ".device", err[0], err[1], device)
            label = _get(luks, "label", "str")
            if label and len(label) > 47:
                self.r.error(p + ".label", "luks device labels cannot be longer than 47 characters",
                             "luks-label", label)
            key = _get(luks, "keyFile", "dict")
            if key:
                self.resource(key, p + ".keyFile")
            clevis = _get(luks, "clevis", "dict") or {}
            for j, tang in _items(clevis, "tang"):
                url = _get(tang, "url", "str")
                if url:
                    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
                    if scheme not in ("http", "https"):
                        self.r.error(f"{p}.clevis.tang.{j}.url", "invalid url scheme", "url-scheme", url)

    # systemd
    def systemd(self, systemd: dict) -> None:
        seen: Dict[str, int] = {}
        for i, unit in _items(systemd, "units"):
            p = f"$.systemd.units.{i}"
            name = _get(unit, "name", "str")
            if not name:
                self.r.error(p + ".name", "unit name is required", "unit-name-required")
            else:
                if not name.endswith(UNIT_SUFFIXES) or name.rsplit(".", 1)[0] == "":
                    self.r.error(p + ".name", "invalid systemd unit extension (use .service, .socket, .target, "
                                 ".timer, .mount, .path, ...)", "unit-suffix", name)
                self.dup(seen, name, i, p + ".name")
            contents = _get(unit, "contents", "str")
            if contents:
                err = unit_contents_error(contents)
                if err:
                    self.r.error(p + ".contents", f"invalid unit content: {err}", "unit-contents")
                elif _get(unit, "enabled", "bool") and not has_install_section(contents):
                    self.r.warn(p + ".contents", f"unit {name!r} is enabled, but has no install section so "
                                "enable does nothing", "unit-no-install")
            if _get(unit, "mask", "bool") and _get(unit, "enabled", "bool"):
                self.r.warn(p, "unit is both masked and enabled; masking wins and it will not start",
                            "unit-mask-enabled")
            dropins: Dict[str, int] = {}
            for j, dropin in _items(unit, "dropins"):
                dp = f"{p}.dropins.{j}"
                dname = _get(dropin, "name", "str")
                if not dname:
                    self.r.error(dp + ".name", "drop-in name is required", "dropin-name-required")
                    continue
                if not dname.endswith(".conf"):
                    self.r.error(dp + ".name", "invalid systemd drop-in extension (must end in .conf)",
                                 "dropin-suffix", dname)
                self.dup(dropins, dname, j, dp + ".name")
                dcontents = _get(dropin, "contents", "str")
                if dcontents:
                    err = unit_contents_error(dcontents)
                    if err:
                        self.r.error(dp + ".contents", f"invalid unit content: {err}", "unit-contents")

    def systemd_conflicts(self, storage: dict, systemd: dict) -> None:
        owned = set()
        for _, unit in _items(systemd, "units"):
            name = _get(unit, "name", "str")
            if not name:
                continue
            if _get(unit, "contents", "str") is not None:
                owned.add(f"/etc/systemd/system/{name}")
            for _, dropin in _items(unit, "dropins"):
                dname = _get(dropin, "name", "str")
                if dname and _get(dropin, "contents", "str") is not None:
                    owned.add(f"/etc/systemd/system/{name}.d/{dname}")
        for section in ("files", "links"):
            for i, node in _items(storage, section):
                path = _get(node, "path", "str")
                if path in owned:
                    self.r.error(f"$.storage.{section}.{i}.path", "path conflicts with systemd unit or dropin",
                                 "path-conflicts-systemd", path)

    # passwd
    def passwd(self, passwd: dict) -> None:
        for section, what in (("users", "user"), ("groups", "group")):
            seen: Dict[str, int] = {}
            for i, entry in _items(passwd, section):
                p = f"$.passwd.{section}.{i}"
                name = _get(entry, "name", "str")
                if not name:
                    self.r.error(p + ".name", f"{what} name is required", "name-required")
                else:
                    self.dup(seen, name, i, p + ".name")
                if entry.get("shouldExist") is False:
                    others = [k for k in entry if k not in ("name", "shouldExist") and entry[k] is not None]
                    if others:
                        self.r.warn(p, "shouldExist is false, so the other fields are ignored",
                                    "should-not-exist-with-others", sorted(others))
                for key in ("homeDir", "shell"):
                    value = _get(entry, key, "str")
                    if value and not value.startswith("/"):
                        self.r.warn(f"{p}.{key}", f"{key} should be an absolute path", "path-absolute", value)
                for key in ("uid", "gid"):
                    n = _get(entry, key, "int")
                    if n is not None and not 0 <= n <= 0xFFFFFFFE:
                        self.r.warn(f"{p}.{key}", f"{key} out of range (0..4294967294)", "id-range", n)
                keys: Dict[str, int] = {}
                for j, key in enumerate(_get(entry, "sshAuthorizedKeys", "list") or []):
                    if isinstance(key, str):
                        if key in keys:
                            self.r.warn(f"{p}.sshAuthorizedKeys.{j}", "duplicate ssh key (same as entry "
                                        f"{keys[key]})", "duplicate")
                        keys.setdefault(key, j)

    def kernel_arguments(self, kargs: dict) -> None:
        seen: Dict[str, str] = {}
        for section in ("shouldExist", "shouldNotExist"):
            for i, arg in enumerate(_get(kargs, section, "list") or []):
                if not isinstance(arg, str):
                    continue
                p = f"$.kernelArguments.{section}.{i}"
                if arg in seen:
                    self.r.error(p, f"duplicate entry defined (also at {seen[arg]})", "duplicate", arg)
                else:
                    seen[arg] = p
