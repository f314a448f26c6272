"""Checks of single values as Ignition does them: paths, URLs (sources), hashes, unit text."""

import re
from typing import List, Optional, Tuple
from urllib.parse import parse_qs

from agent.ignition import spec
from agent.ignition.dataurl import CONTROL_MESSAGE, data_url_error, has_control_character

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
    if url[:5].lower() == "data:":
        err = data_url_error(url)  # control characters included, in the same pass
        return (err, "url-invalid" if err == CONTROL_MESSAGE else "data-url") if err else None
    if has_control_character(url):
        return CONTROL_MESSAGE, "url-invalid"
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
    """Ignition checks the function and the digest's *length* only, not that it is hex
    (config/v3_*/types/verification.go ``Verification.Validate``: ``len(sum) !=
    hex.EncodedLen(hash.Size())``); a non-hex digest of the right length fails at fetch time."""
    function, dash, digest = value.partition("-")
    if not dash:
        return "malformed hash specifier (expected sha512-<hex>)", "hash-malformed"
    since = spec.HASH_FUNCTION_SINCE.get(function)
    if since is None or since > declared:
        extra = f" ({function} needs spec {spec.version_text(since)})" if since else ""
        return f"unrecognized hash function {function!r}{extra}", "hash-function"
    if len(digest) != HASH_SIZES[function] * 2:
        return (f"incorrect size for hash sum ({function} needs {HASH_SIZES[function] * 2} hex digits, "
                f"got {len(digest)})"), "hash-size"
    return None


def unit_contents_error(text: str) -> Optional[str]:
    """The error go-systemd's unit deserializer (unit/deserialize.go, which Ignition's
    config/v3_*/types/unit.go ``validateUnitContent`` calls) gives for ``text``, or None.

    Its lexer: text before the first ``[`` is skipped; a section name runs to the next ``]``
    (even across lines); only blanks may follow it on its line; an option name must reach
    ``=`` before the end of its line or of the text; a value runs to the end of its line,
    continued by a trailing backslash; a line of SYSTEMD_LINE_MAX bytes or more is refused.
    """
    for n, line in enumerate(text.splitlines(), 1):
        if len(line.encode("utf-8", "surrogatepass")) >= SYSTEMD_LINE_MAX:
            return f"line {n}: line too long (max {SYSTEMD_LINE_MAX} bytes)"
    pos = _first_section(text)
    if pos < 0:
        return None
    size = len(text)
    while pos < size:
        end = text.find("]", pos)
        if end < 0:
            return "unable to find end of section"
        eol = _eol(text, end)
        if text[end + 1:eol].strip():
            return f"found garbage after section name {text[pos + 1:end]}: {text[end + 1:eol].strip()!r}"
        pos = eol + 1
        while pos < size:  # options (and blanks and comments) until the next section
            ch = text[pos]
            if ch.isspace():
                pos += 1
            elif ch == "[":
                break
            elif ch in "#;":
                pos = _eol(text, pos) + 1
            else:
                eq = text.find("=", pos)
                eol = _eol(text, pos)
                if eq < 0:
                    return "unexpected end of unit text while parsing option name (no '=')"
                if eq > eol:
                    return f"unexpected newline encountered while parsing option name {text[pos:eol].strip()!r}"
                pos = _value_end(text, eq + 1) + 1
        else:
            return None
    return None


def _first_section(text: str) -> int:
    """Where the first section starts: before it, a '#' or ';' ends the line's scan and any
    other character is skipped (go-systemd ``lexNextSection``). -1 when there is none."""
    pos = 0
    for line in text.splitlines(keepends=True):
        for i, ch in enumerate(line):
            if ch == "[":
                return pos + i
            if ch in "#;":
                break
        pos += len(line)
    return -1


def _eol(text: str, pos: int) -> int:
    """Index of the line end (\n or \r) at or after ``pos``, or len(text)."""
    ends = [i for i in (text.find("\n", pos), text.find("\r", pos)) if i >= 0]
    return min(ends) if ends else len(text)


def _value_end(text: str, pos: int) -> int:
    """End of an option value starting at ``pos``: a line ending in a backslash continues."""
    while True:
        eol = _eol(text, pos)
        if eol >= len(text) or not text[pos:eol].rstrip().endswith("\\"):
            return eol
        pos = eol + 1


def install_section_options(text: str) -> bool:
    """Whether the unit has an option in an [Install] section (what Ignition's
    config/shared/validations/unit.go ``ValidateInstallSection`` looks for)."""
    section = ""
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("[") and "]" in s:
            section = s[1:s.index("]")]
        elif section == "Install" and "=" in s and s[0] not in "#;":
            return True
    return False
