"""Checks of single values as Ignition does them: paths, URLs (sources), hashes, unit text."""

import re
from typing import List, Optional, Tuple
from urllib.parse import parse_qs

from agent.errors import ConfigError
from agent.ignition import spec
from agent.ignition.dataurl import decode_data_url

HASH_SIZES = {"sha512": 64, "sha256": 32}
SYSTEMD_LINE_MAX = 2048


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

