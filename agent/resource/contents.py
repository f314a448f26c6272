"""The contents of a config's files and appends: ``data:`` URLs decoded, http(s) sources fetched
(through the Fetcher: deadline, retries, CA trust, proxies), gzip undone within the config's
decompression budget, ``verification.hash`` checked. The apply asks here for bytes and never
fetches itself; a failed fetch changes nothing, since contents are all resolved before the apply
writes a byte."""

import hashlib
from typing import Dict, Optional

from agent.core.nodeconfig import NodeConfig
from agent.errors import ConfigError, FetchError, HostError, Problem


def _decode_data(url: str, where: str) -> bytes:
    from agent.ignition.dataurl import decode_data_url

    try:
        return decode_data_url(url)
    except ConfigError as e:
        raise ConfigError(f"{where}.source: {e}", [Problem(f"{where}.source", str(e))])


def _decompress(data: bytes, compression: str, where: str, limit: Optional[int] = None) -> bytes:
    from agent.ignition.dataurl import decompress

    try:
        return decompress(data, compression, limit)
    except ConfigError as e:
        raise ConfigError(f"{where}.compression: {e}", [Problem(f"{where}.compression", str(e))])


def _verify(data: bytes, verification: Optional[Dict], where: str) -> None:
    spec = (verification or {}).get("hash")
    if not spec:
        return
    algo, _, want = spec.partition("-")
    if algo not in ("sha512", "sha256"):
        raise ConfigError(f"{where}.verification.hash: unsupported hash {algo!r}",
                          [Problem(f"{where}.verification.hash", f"unsupported hash type {algo!r}")])
    got = hashlib.new(algo, data).hexdigest()
    if got != want.lower():
        raise FetchError(f"{where}: contents do not match verification.hash ({algo} {got}, expected {want})")


def resolve_resource(res: Dict, where: str, fetcher, limit: Optional[int] = None) -> bytes:
    """Bytes of an Ignition resource (``source``, ``compression``, ``verification``); a
    compressed one expands to at most ``limit`` bytes."""
    url = res.get("source") or ""
    compression = res.get("compression") or ""
    verification = res.get("verification")
    scheme = url.split(":", 1)[0].lower()
    if url == "":
        raw = b""  # an empty source is an empty file (Ignition; spec 2.2 files without contents)
    elif scheme == "data":
        raw = _decode_data(url, where)
    elif scheme in ("http", "https"):
        if fetcher is None:
            try:
                from agent.resource.fetch import Fetcher
            except ImportError:
                raise HostError(f"{where}.source: no fetcher available for {url}")
            fetcher = Fetcher()
        # The hash covers the decompressed contents (as Ignition), so the fetcher verifies it
        # only when there is nothing to decompress.
        try:
            raw = fetcher.fetch(url, verification=None if compression else verification).body
        except FetchError as exc:  # what to do names this file's source, not the pointer config's server
            if not getattr(exc, "hint", None):
                exc.hint = (f"the config's file source {where}.source ({url}) could not be fetched: make it reachable "  # type: ignore[attr-defined]
                            f"from this node, or fix the MachineConfig that names it (a data: URL needs no server); "
                            f"the journal shows each attempt (NODE_AGENT_ATTEMPT)")
            raise
    else:
        raise ConfigError(f"{where}.source: scheme {scheme!r} is not supported by node-agent (use data, http or https)",
                          [Problem(f"{where}.source", f"unsupported scheme {scheme!r}", value=url)])
    data = _decompress(raw, compression, where, limit)
    if scheme in ("data", "") or compression:
        _verify(data, verification, where)
    return data


def resolve_contents(cfg: NodeConfig, fetcher=None) -> Dict[str, bytes]:
    """All file contents of ``cfg`` keyed by JSON path (``$.storage.files.N.contents`` / ``.append.K``)."""
    from agent.ignition.dataurl import MAX_CONFIG_DECOMPRESSED

    out: Dict[str, bytes] = {}
    total = 0  # compressed contents of the whole config expand to at most MAX_CONFIG_DECOMPRESSED
    for i, f in enumerate(cfg.files):
        w = f"$.storage.files.{i}"
        items = [(f"{w}.contents", f.get("contents") or {})]
        items += [(f"{w}.append.{k}", a) for k, a in enumerate(f.get("append") or [])]
        for where, res in items:
            if res.get("source") is None:
                continue
            data = resolve_resource(res, where, fetcher, MAX_CONFIG_DECOMPRESSED - total)
            if res.get("compression"):
                total += len(data)
            out[where] = data
    return out
