"""RFC 2397 ``data:`` URLs and the one compression Ignition knows (gzip)."""

import base64
import binascii
import re
import zlib
from typing import Optional, Tuple
from urllib.parse import unquote_to_bytes

from agent.errors import ConfigError

MAX_DECOMPRESSED = 1 << 30  # refuse gzip bombs beyond 1 GiB
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_WHITESPACE = b" \t\n\r\x0b\x0c"
_BASE64_ALPHABET = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_"


def split_data_url(url: str) -> Tuple[str, bool, str]:
    """``data:text/plain;base64,SGk=`` -> ("text/plain", True, "SGk=")."""
    if not isinstance(url, str) or url[:5].lower() != "data:":
        raise ConfigError(f"not a data URL: {_short(url)!r}")
    header, comma, payload = url[5:].partition(",")
    if not comma:
        raise ConfigError(f"invalid data URL (no ',' before the data): {_short(url)!r}")
    params = header.split(";")
    is_base64 = len(params) > 1 and params[-1].strip().lower() == "base64"
    if is_base64:
        params = params[:-1]
    mediatype = ";".join(params).strip() or "text/plain;charset=US-ASCII"
    if ";" not in mediatype and "/" not in mediatype:
        raise ConfigError(f"invalid data URL media type {mediatype!r}")
    return mediatype, is_base64, payload


def data_url_error(url: str) -> Optional[str]:
    """Why ``url`` is not a data URL Ignition can decode, or None; never decodes the data.

    The same verdict as ``decode_data_url`` at C speed (str/bytes methods and one regex, no
    per-character Python loop): validating a config full of large data URLs stays fast.
    """
    try:
        _, is_base64, payload = split_data_url(url)
    except ConfigError as exc:
        return str(exc)
    if "%" in payload:
        if _BAD_ESCAPE.search(payload):
            return _bad_escape_message(payload)
        if is_base64:
            payload = unquote_to_bytes(payload).decode("latin-1")
    if not is_base64:
        return None
    try:
        raw = payload.encode("ascii")
    except UnicodeEncodeError:
        return f"invalid base64 in data URL: {_short(url)!r}"
    compact = raw.translate(None, _WHITESPACE)
    body = compact.rstrip(b"=")
    pads = len(compact) - len(body)
    added = -len(compact) % 4
    if body.translate(None, _BASE64_ALPHABET) or len(body) % 4 == 1 or pads + added != -len(body) % 4:
        return f"invalid base64 in data URL: {_short(url)!r}"
    return None


def _bad_escape_message(payload: str) -> str:
    # the wording of the dataurl library Ignition uses (vincent-petithory/dataurl rfc2396.go)
    return "rfc2396: invalid char 0x25 in unescape sequence"


def decode_data_url(url: str) -> bytes:
    """The bytes a ``data:`` URL carries (base64 or percent-encoded, any media type)."""
    err = data_url_error(url)  # one definition of "valid" for validation and decoding
    if err:
        raise ConfigError(err)
    _, is_base64, payload = split_data_url(url)
    try:
        raw = unquote_to_bytes(payload)
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


def decompress(data: bytes, compression: Optional[str]) -> bytes:
    """Undo ``compression`` ("" / None: nothing; "gzip")."""
    if not compression:
        return data
    if compression != "gzip":
        raise ConfigError(f"unsupported compression {compression!r}: only \"gzip\" (or none) is allowed")
    out = b""
    rest = data
    try:
        while True:  # concatenated gzip members, as gzip(1) may write them
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out += d.decompress(rest, MAX_DECOMPRESSED - len(out) + 1)
            if d.unconsumed_tail or len(out) > MAX_DECOMPRESSED:
                raise ConfigError(f"gzip data expands beyond {MAX_DECOMPRESSED} bytes; refused")
            if not d.eof:
                raise ConfigError("invalid gzip data: truncated")
            rest = d.unused_data
            if not rest.strip(b"\0"):
                return out
    except zlib.error as exc:
        raise ConfigError(f"invalid gzip data: {exc}") from None


def _short(text, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit] + "..."
