"""RFC 2397 ``data:`` URLs and the one compression Ignition knows (gzip)."""

import base64
import binascii
import zlib
from typing import Any, Iterator, List, Optional, Tuple
from urllib.parse import unquote_to_bytes

try:
    from codecs import escape_decode as _escape_decode  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - not public API; every CPython 3.9-3.13 has it
    _escape_decode = None

from agent.errors import ConfigError

MAX_DECOMPRESSED = 1 << 30  # refuse gzip bombs beyond 1 GiB
MAX_CONFIG_DECOMPRESSED = 1 << 30  # and all compressed contents of one config together
_GZIP_SLICE = 1 << 12  # small: what a member leaves over (unused_data) is copied once per member
_GZIP_PIECE = 1 << 16  # output per zlib call (max_length): a bomb's slice cannot expand at once
_GZIP_KEEP = 4 << 20  # output kept in the first pass; beyond it only counted (see decompress)
# one translation table marks what the checks look for: ASCII control characters become 0x00
# and hex digits 0x01 (other bytes stay), so "%" + two hex digits is b"%\x01\x01": counting
# those against "%" finds a broken escape, and a 0x00 a control character, at C speed
_CONTROLS = bytes(range(0x20)) + b"\x7f"
_HEX = b"0123456789ABCDEFabcdef"
_MARKS = bytes.maketrans(_CONTROLS + _HEX, b"\x00" * len(_CONTROLS) + b"\x01" * len(_HEX))
CONTROL_MESSAGE = "unable to parse url (control character)"
BROKEN_ESCAPE_MESSAGE = "rfc2396: invalid char 0x25 in unescape sequence"  # Ignition's dataurl library
_WHITESPACE = b" \t\n\r\x0b\x0c"
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"


def split_data_url(url: str, payload: bool = True) -> Tuple[str, bool, str]:
    """``data:text/plain;base64,SGk=`` -> ("text/plain", True, "SGk="); with ``payload=False``
    the data is not copied out (returned as "")."""
    if not isinstance(url, str) or url[:5].lower() != "data:":
        raise ConfigError(f"not a data URL: {_short(url)!r}")
    comma = url.find(",", 5)
    if comma < 0:
        raise ConfigError(f"invalid data URL (no ',' before the data): {_short(url)!r}")
    header = url[5:comma]
    params = header.split(";")
    is_base64 = len(params) > 1 and params[-1].strip().lower() == "base64"
    if is_base64:
        params = params[:-1]
    mediatype = ";".join(params).strip() or "text/plain;charset=US-ASCII"
    if ";" not in mediatype and "/" not in mediatype:
        raise ConfigError(f"invalid data URL media type {mediatype!r}")
    return mediatype, is_base64, url[comma + 1:] if payload else ""


def data_url_error(url: str) -> Optional[str]:
    """Why ``url`` is not a data URL Ignition can decode, or None; never decodes the data.

    The same verdict as ``decode_data_url``, control characters (which Go's url.Parse refuses)
    included, in one translate pass over the whole URL and a count or two (C speed, no copy of
    the payload, no per-character Python loop), so a config of large data URLs validates fast.
    """
    try:
        _, is_base64, _ = split_data_url(url, payload=False)
    except ConfigError as exc:
        return str(exc)
    return _payload_error(url, is_base64)


def _payload_error(url: str, is_base64: bool) -> Optional[str]:
    """``data_url_error`` once the header is known to parse."""
    raw = url.encode("utf-8", "surrogatepass")  # a copy at memory speed for ASCII text
    comma = raw.find(b",")
    if not is_base64:
        marked = raw.translate(_MARKS)
        if b"\x00" in marked:
            return CONTROL_MESSAGE
        if marked.count(b"%") != marked.count(b"%\x01\x01"):
            return BROKEN_ESCAPE_MESSAGE
        return None
    if b"\x00" in raw[:comma].translate(_MARKS):
        return CONTROL_MESSAGE
    # the common case, one pass: deleting the alphabet from the whole URL leaves the header's
    # other characters, the comma, and the padding at the very end
    left = raw.translate(None, _BASE64_ALPHABET)
    head = raw[:comma].translate(None, _BASE64_ALPHABET) + b","
    pads = len(left) - len(head)
    if left.startswith(head) and left[len(head):] == b"=" * pads and raw.endswith(b"=" * pads) and \
            _padding_ok(len(raw) - comma - 1 - pads, pads):
        return None
    payload = url[url.index(",") + 1:]
    if has_control_character(payload):
        return CONTROL_MESSAGE
    data = payload.encode("utf-8", "surrogatepass")
    if b"%" in data:
        if has_broken_escape(payload):
            return BROKEN_ESCAPE_MESSAGE
        data = unquote_to_bytes(data)
    if not _base64_ok(data.translate(None, _WHITESPACE)):
        return f"invalid base64 in data URL: {_short(url)!r}"
    return None


def _padding_ok(body: int, pads: int) -> bool:
    """Padding optional, but never more "=" than the length needs (and never 1 char left over)."""
    return body % 4 != 1 and pads + (-(body + pads) % 4) == -body % 4


def _base64_ok(raw: bytes) -> bool:
    """Standard or URL-safe alphabet, then ``_padding_ok``."""
    body = raw.rstrip(b"=")
    return not body.translate(None, _BASE64_ALPHABET) and _padding_ok(len(body), len(raw) - len(body))


def has_broken_escape(text: str) -> bool:
    """Whether a "%" in ``text`` is not followed by two hex digits."""
    marked = text.encode("utf-8", "surrogatepass").translate(_MARKS)
    return marked.count(b"%") != marked.count(b"%\x01\x01")


def has_control_character(text: str) -> bool:
    """Whether ``text`` holds an ASCII control character (which Go's url.Parse refuses)."""
    return b"\x00" in text.encode("utf-8", "surrogatepass").translate(_MARKS)


def decode_data_url(url: str) -> bytes:
    """The bytes a ``data:`` URL carries (base64 or percent-encoded, any media type)."""
    _, is_base64, _ = split_data_url(url, payload=False)
    err = _payload_error(url, is_base64)  # one definition of "valid" for validation and decoding
    if err:
        raise ConfigError(err)
    if is_base64:
        data = _plain_base64(url)
        if data is not None:
            return data
    _, _, payload = split_data_url(url)
    try:
        raw = unquote_valid(payload)
    except Exception as exc:  # pragma: no cover - unquote_to_bytes is lenient
        raise ConfigError(f"invalid data URL: {exc}") from None
    if not is_base64:
        return raw
    compact = b"".join(raw.split())
    compact += b"=" * (-len(compact) % 4)
    try:
        return base64.b64decode(compact, validate=True)
    except (binascii.Error, ValueError):
        # URL-safe alphabet is common in hand-written configs
        try:
            return base64.b64decode(compact.replace(b"-", b"+").replace(b"_", b"/"), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigError(f"invalid base64 in data URL: {_short(url)!r}") from None


def _plain_base64(url: str) -> Optional[bytes]:
    """The common case of ``decode_data_url`` (standard alphabet, no "%", padded, whitespace
    allowed) with one copy of the payload (the URL's bytes) and the output, not four: binascii
    reads the payload in place and skips whitespace. None for anything else (the exact path).
    Only for a URL ``_payload_error`` accepted: its alphabet and padding are checked already."""
    try:
        raw = url.encode("ascii")
    except UnicodeEncodeError:
        return None
    start = raw.index(b",") + 1
    if raw.find(b"%", start) >= 0 or raw.find(b"-", start) >= 0 or raw.find(b"_", start) >= 0:
        return None
    try:
        return binascii.a2b_base64(memoryview(raw)[start:])
    except (binascii.Error, ValueError):  # padding left out: the exact path adds it
        return None


def unquote_valid(text: str) -> bytes:
    """``urllib.parse.unquote_to_bytes`` of text whose every "%" starts a valid escape (what
    ``data_url_error`` accepts), at C speed: unquote_to_bytes loops in Python once per escape,
    and a 1 MB text file written with ``quote(text, safe="")`` has ~200,000 of them. The escapes
    become Python's ``\\xHH`` byte-string escapes (backslashes doubled first, so no other escape
    exists) for the C decoder behind ``codecs.escape_decode``; tests/unit/test_dataurl_unquote.py
    checks it against unquote_to_bytes."""
    data = text.encode("utf-8")
    if b"%" not in data:
        return data
    if _escape_decode is None:  # pragma: no cover - every CPython 3.9-3.13 has it
        return unquote_to_bytes(data)
    return _escape_decode(data.replace(b"\\", b"\\\\").replace(b"%", b"\\x"))[0]


def decompress(data: bytes, compression: Optional[str], limit: Optional[int] = None) -> bytes:
    """Undo ``compression`` ("" / None: nothing; "gzip"); at most ``limit`` bytes out
    (MAX_DECOMPRESSED by default).

    Linear in the input and output: the input is fed in slices (concatenated gzip members, as
    gzip(1) may write them, used to copy the rest of the input once per member: 768 KB of tiny
    members took minutes). Bounded in memory: the output comes in pieces of at most 64 KiB, and
    past _GZIP_KEEP bytes the pieces are no longer kept but only counted, so a gzip bomb is
    refused as soon as its output passes ``limit`` having held at most _GZIP_KEEP bytes of it
    (it held up to ``limit``, 1 GiB, before). Output that passed _GZIP_KEEP but stays within
    ``limit`` is decompressed a second time, to keep it.
    """
    if not compression:
        return data
    if compression != "gzip":
        raise ConfigError(f"unsupported compression {compression!r}: only \"gzip\" (or none) is allowed")
    limit = MAX_DECOMPRESSED if limit is None else limit
    kept: List[bytes] = []
    size = 0
    for piece in _gunzip(data, limit):
        size += len(piece)
        if size <= _GZIP_KEEP:
            kept.append(piece)
        elif kept:
            kept = []  # large: count the rest, keep nothing until the size is known to be allowed
    if size <= _GZIP_KEEP:
        return b"".join(kept)
    return b"".join(_gunzip(data, limit))


def _gunzip(data: bytes, limit: int) -> Iterator[bytes]:
    """The output of the gzip members in ``data`` in pieces of at most _GZIP_PIECE bytes; raises
    ConfigError for invalid or truncated data, and as soon as the output passes ``limit``."""
    view = memoryview(data)
    end = len(data.rstrip(b"\0")) if data.endswith(b"\0") else len(data)  # NUL padding after the last member
    total = 0
    pos = 0
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        while True:
            if d.unconsumed_tail:  # the last call stopped at _GZIP_PIECE bytes out: its input goes on
                chunk: Any = d.unconsumed_tail
            else:
                chunk = view[pos:pos + _GZIP_SLICE]
                pos += len(chunk)
            piece = d.decompress(chunk, _GZIP_PIECE)
            total += len(piece)
            if total > limit:
                raise ConfigError(f"gzip data expands beyond {limit} bytes; refused")
            if piece:
                yield piece
            if d.eof:
                pos -= len(d.unused_data)  # what the member left over is the end of the last slice
                if pos >= end:
                    return
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member
            elif not chunk and not piece:  # no input left, and zlib has nothing more from it
                raise ConfigError("invalid gzip data: truncated")
    except zlib.error as exc:
        raise ConfigError(f"invalid gzip data: {exc}") from None


def _short(text, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
