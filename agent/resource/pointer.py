"""Resolving a pointer config (``ignition.config.merge``/``replace``, CAs, proxy) into the config
it stands for, as Ignition's renderConfig does: every referenced config fetched through the
Fetcher, decompressed once, verified, validated, and merged parent first."""

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from agent.errors import ConfigError, Problem
from agent.resource.transport import pool_from_url, short_url
from agent.resource.verification import check_hash, parse_hash

if TYPE_CHECKING:  # only named in annotations: the Fetcher is handed in by the caller
    from agent.resource.fetch import Fetcher, FetchResult

log = logging.getLogger(__name__)

MAX_DEPTH = 8  # nesting of merge/replace references; Ignition has no limit, loops are caught anyway


@dataclass(frozen=True)
class ResolvedConfig:
    ignition: Dict[str, Any]  # the final Ignition config (ignition.config references consumed)
    sources: List[str]  # every config URL fetched, in order
    etag: Optional[str]  # of the pool's config (/config/<pool>), else of the last config fetched
    served_name: Optional[str]  # rendered config name from the served node annotations, if any
    # True when everything but the ``ignition`` section comes from one fetched config, validated
    # whole at its own spec version: the caller then validates only the ``ignition`` section
    # (first boot validated a 100 MB config twice: once fetched, once merged).
    validated: bool = False


@dataclass
class _Walk:
    fetcher: "Fetcher"
    max_depth: int
    sources: List[str] = field(default_factory=list)
    pool_etag: Optional[str] = None
    last_etag: Optional[str] = None
    content_versions: List[str] = field(default_factory=list)  # of validated configs with more than `ignition`


def _resource_headers(ref: dict) -> Dict[str, str]:
    return {str(h.get("name")): str(h.get("value", "")) for h in ref.get("httpHeaders") or []
            if isinstance(h, dict) and h.get("name")}


def _fetch_resource(walk: _Walk, ref: Any, where: str, ignition: bool) -> Tuple[bytes, "FetchResult"]:
    """Fetch one Ignition Resource (source, compression, verification, httpHeaders); decompressed body."""
    if not isinstance(ref, dict) or not isinstance(ref.get("source"), str) or not ref["source"]:
        raise ConfigError(f"{where}: expected an object with a source URL",
                          [Problem(f"{where}.source", "expected a URL", "resource-source")])
    compression = ref.get("compression")
    # Ignition's verification.hash describes the *decompressed* config when compression is set
    # (spec 3.1+: "If compression is specified, the hash describes the decompressed config"),
    # so a compressed resource is verified after gunzip, a plain one by the fetcher.
    verification = ref.get("verification")
    expected = parse_hash(verification, f"{where}.verification.hash")
    result = walk.fetcher.fetch(ref["source"], ignition=ignition, verification=None if compression else verification,
                                headers=_resource_headers(ref))
    body = result.body
    if compression:
        from agent.ignition.dataurl import decompress

        body = decompress(body, compression)
        check_hash(body, expected, result.url)
    return body, result


def trust_config_cas(cfg: dict, fetcher: "Fetcher", source: str = "pointer config") -> int:
    """Add ``cfg``'s ``ignition.security.tls.certificateAuthorities`` to ``fetcher``'s trust.

    Used by resolve_pointer for every config on the way, and on its own when a run resumes from
    a saved config but still needs the pointer's CAs (reports, file sources). Returns the count.
    """
    return _add_cas(_Walk(fetcher=fetcher, max_depth=MAX_DEPTH), cfg, source)


def _add_cas(walk: _Walk, cfg: dict, source: str) -> int:
    walk.fetcher.adopt_proxy(cfg, source)  # first: the CA bundles themselves come through it
    cas = ((((cfg.get("ignition") or {}).get("security") or {}).get("tls") or {})
           .get("certificateAuthorities") or [])
    for i, ref in enumerate(cas):
        where = f"$.ignition.security.tls.certificateAuthorities.{i}"
        pem, _ = _fetch_resource(walk, ref, where, ignition=False)
        walk.fetcher.add_ca(pem, source=f"{source} {where}")
    return len(cas)


def _fetch_config(walk: _Walk, ref: Any, where: str, chain: Tuple[str, ...]) -> Tuple[dict, str]:
    from agent.ignition.parse import parse_document
    from agent.ignition.validate import validate_ignition

    url = ref.get("source") if isinstance(ref, dict) else None
    if isinstance(url, str) and url in chain:
        loop = " -> ".join([*chain[1:], url])
        raise ConfigError(f"config references loop: {loop}; check {where}",
                          [Problem(where, f"{url} refers back to itself", "config-loop")], chain[-1])
    if len(chain) > walk.max_depth:
        raise ConfigError(f"config references nested deeper than {walk.max_depth} levels at {where}",
                          [Problem(where, "too deeply nested", "config-depth")], chain[-1])
    body, result = _fetch_resource(walk, ref, where, ignition=True)
    label = short_url(result.url)
    doc = parse_document(body, label)
    if not isinstance(doc, dict):
        raise ConfigError(f"config fetched from {label} is not an Ignition config (JSON object)", source=label)
    problems = validate_ignition(doc)
    errors = [p for p in problems if p.is_error]
    for p in problems:
        if not p.is_error:
            log.warning("config fetched from %s: %s", label, p, extra={"NODE_AGENT_STAGE": "fetch"})
    if errors:
        raise ConfigError(f"config fetched from {label} (referenced at {where}) is invalid", problems, label)
    walk.sources.append(result.url)
    if set(doc) - {"ignition"}:
        walk.content_versions.append(str((doc.get("ignition") or {}).get("version")))
    if result.etag:
        walk.last_etag = result.etag
        if walk.pool_etag is None and pool_from_url(result.url):
            walk.pool_etag = result.etag
    return doc, result.url


def _render(walk: _Walk, cfg: dict, chain: Tuple[str, ...]) -> dict:
    """Ignition's renderConfig: trust this config's CAs, then follow replace, else merge each child."""
    from agent.ignition.merge import merge_ignition

    _add_cas(walk, cfg, chain[-1])
    refs = (cfg.get("ignition") or {}).get("config") or {}
    replace = refs.get("replace") or {}
    if replace.get("source"):
        child, url = _fetch_config(walk, replace, f"{chain[-1]} $.ignition.config.replace", chain)
        return _render(walk, child, (*chain, url))
    result = cfg
    for i, ref in enumerate(refs.get("merge") or []):
        child, url = _fetch_config(walk, ref, f"{chain[-1]} $.ignition.config.merge.{i}", chain)
        result = merge_ignition(result, _render(walk, child, (*chain, url)))
    return result


def _strip_references(cfg: dict) -> dict:
    ign = cfg.get("ignition")
    if not isinstance(ign, dict) or "config" not in ign:
        return cfg
    return {**cfg, "ignition": {k: v for k, v in ign.items() if k != "config"}}


def served_config_name(cfg: dict) -> Optional[str]:
    """The rendered config name the server put in the node annotations file, if it did."""
    from agent.core.served import read_served

    try:
        return read_served(cfg).config_name or None
    except ConfigError:  # an odd annotations file just means "no name"; the pipeline reports it
        return None


def resolve_pointer(pointer: dict, fetcher: "Fetcher", *, source: str = "pointer config",
                    max_depth: int = MAX_DEPTH) -> ResolvedConfig:
    """Follow a pointer config's references (CAs, replace, merge[]) to the config it stands for.

    As Ignition: the pointer's CAs are trusted for every later fetch; ``replace`` makes the fetched
    config the result; each ``merge`` child is fetched, resolved in turn, and merged over the
    result so far (parent first, child wins). Each fetched config is validated; problems raise
    ConfigError naming the source URL. Loops and nesting deeper than ``max_depth`` are refused.
    """
    walk = _Walk(fetcher=fetcher, max_depth=max_depth)
    final = _strip_references(_render(walk, pointer, (source,)))
    version = str((final.get("ignition") or {}).get("version"))
    validated = (not set(pointer) - {"ignition"} and len(walk.content_versions) <= 1
                 and all(v == version and v.startswith("3.") for v in walk.content_versions))
    return ResolvedConfig(ignition=final, sources=list(walk.sources), etag=walk.pool_etag or walk.last_etag,
                          served_name=served_config_name(final), validated=validated)
