"""Ignition's ``verification.hash``: parsed once (``sha512-<hex>`` or ``sha256-<hex>``), checked on
the bytes as Ignition hashes them (the decompressed ones when compression is set)."""

import hashlib
from typing import Optional, Tuple

from agent.errors import ConfigError, FetchError, Problem
from agent.resource.transport import short_url

_HASHES = {"sha512": hashlib.sha512, "sha256": hashlib.sha256}


def parse_hash(verification: Optional[dict], where: str = "verification.hash") -> Optional[Tuple[str, str]]:
    """``(algorithm, hex digest)`` from an Ignition ``verification`` object, or None when absent."""
    if not verification:
        return None
    value = verification.get("hash")
    if value is None:
        return None
    algo, sep, digest = str(value).partition("-")
    digest = digest.lower()
    ok = sep and algo in _HASHES and len(digest) == _HASHES[algo]().digest_size * 2
    if ok:
        try:
            bytes.fromhex(digest)
        except ValueError:
            ok = False
    if not ok:
        raise ConfigError(f"{where}: expected sha512-<128 hex digits> or sha256-<64 hex digits>",
                          [Problem(where, "expected sha512-<hex> or sha256-<hex>", "hash-format", value=value)])
    return algo, digest


def check_hash(body: bytes, expected: Optional[Tuple[str, str]], url: str) -> None:
    """Raise a final FetchError when ``body`` does not match ``expected`` (from parse_hash)."""
    if expected is None:
        return
    algo, digest = expected
    actual = _HASHES[algo](body).hexdigest()
    if actual != digest:
        raise FetchError(f"content of {short_url(url)} does not match its verification.hash: expected "
                         f"{algo}-{digest}, got {algo}-{actual}; it was changed or corrupted, not using it",
                         url=url, final=True)
