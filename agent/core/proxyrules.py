"""HTTP(S) proxies for every request the agent makes: config fetches, CA bundles, reports, drains.

Where a proxy comes from, later sources winning field by field: the environment
(``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY``, upper or lower case: what the units get from
``/etc/mco/proxy.env`` on an OpenShift node), then agent.yaml's ``proxy`` section, then
``ignition.proxy`` of the pointer config (and of configs it merges), as Ignition uses it.

Which URLs bypass it follows Go's golang.org/x/net/http/httpproxy, the package Ignition's
fetcher uses (coreos/ignition internal/resource/http.go): ``localhost`` and loopback addresses
never use a proxy; a noProxy entry is ``*`` (everything), an IP address or CIDR, or a domain
(``example.com`` matches it and its subdomains, ``.example.com`` only subdomains, ``*.x`` as
``.x``), each optionally with ``:port``. The matching here is pure; agent.resource.proxy's
``RoutedAdapter`` is the one hook into requests: it decides the proxy of each request (redirects
included) from its URL.
"""

import ipaddress
from dataclasses import dataclass, replace
from typing import Any, Mapping, Optional, Tuple
from urllib.parse import urlsplit

_ENV_NAMES = (("http_proxy", "HTTP_PROXY"), ("https_proxy", "HTTPS_PROXY"), ("no_proxy", "NO_PROXY"))


@dataclass(frozen=True)
class ProxySettings:
    http_proxy: str = ""  # "" = direct
    https_proxy: str = ""
    no_proxy: Tuple[str, ...] = ()

    def overridden_by(self, other: "ProxySettings", given: Tuple[str, ...]) -> "ProxySettings":
        """This, with the fields named in ``given`` taken from ``other``."""
        return replace(self, **{name: getattr(other, name) for name in given})


def from_environment(env: Mapping[str, str]) -> ProxySettings:
    """Proxy settings from HTTP_PROXY/HTTPS_PROXY/NO_PROXY (lower case wins, as in curl and Go)."""
    values = [env.get(lower) or env.get(upper) or "" for lower, upper in _ENV_NAMES]
    return ProxySettings(values[0].strip(), values[1].strip(), _split_no_proxy(values[2]))


def from_ignition(cfg: Any) -> Tuple[ProxySettings, Tuple[str, ...]]:
    """``ignition.proxy`` of a (validated) config and the names of the fields it sets."""
    section = ((cfg or {}).get("ignition") or {}).get("proxy") if isinstance(cfg, dict) else None
    if not isinstance(section, dict):
        return ProxySettings(), ()
    given = []
    settings = ProxySettings()
    if section.get("httpProxy"):
        settings, given = replace(settings, http_proxy=section["httpProxy"]), given + ["http_proxy"]
    if section.get("httpsProxy"):
        settings, given = replace(settings, https_proxy=section["httpsProxy"]), given + ["https_proxy"]
    if section.get("noProxy"):
        settings = replace(settings, no_proxy=tuple(str(e) for e in section["noProxy"] if e))
        given.append("no_proxy")
    return settings, tuple(given)


def check_proxy_url(value: Any) -> Optional[str]:
    """None when ``value`` is a usable proxy URL (or empty), else what is expected."""
    expected = "an http:// or https:// proxy URL (http://host:port), or empty"
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        return expected
    parts = urlsplit(value if "://" in value else "http://" + value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return expected
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError:
        return expected
    return None


def _split_no_proxy(text: str) -> Tuple[str, ...]:
    return tuple(e.strip() for e in text.split(",") if e.strip())


def _host_port(url: str) -> Tuple[str, str, str]:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = {"http": 80, "https": 443}.get(parts.scheme, 0)
    return parts.scheme, host, str(port)


def _entry_matches(entry: str, host: str, port: str, ip: Any) -> bool:
    entry = entry.strip().lower()
    if entry == "*":
        return True
    try:  # a CIDR: no port allowed (as httpproxy)
        if "/" in entry:
            return ip is not None and ip in ipaddress.ip_network(entry, strict=False)
    except ValueError:
        return False
    entry_host, entry_port = entry, ""
    if entry.startswith("["):  # [v6]:port
        entry_host, _, rest = entry[1:].partition("]")
        entry_port = rest[1:] if rest.startswith(":") else ""
    elif entry.count(":") == 1:
        entry_host, entry_port = entry.split(":")
    if entry_port and entry_port != port:
        return False
    try:
        entry_ip: Any = ipaddress.ip_address(entry_host)
    except ValueError:
        entry_ip = None
    if entry_ip is not None:
        return ip is not None and ip == entry_ip
    if entry_host.startswith("*."):
        entry_host = entry_host[1:]
    if entry_host.startswith("."):
        return host.endswith(entry_host)
    return host == entry_host or host.endswith("." + entry_host)


def bypasses(url: str, no_proxy: Tuple[str, ...]) -> bool:
    """True when ``url`` must be fetched directly (loopback, or matched by a noProxy entry)."""
    _, host, port = _host_port(url)
    if not host or host == "localhost":
        return True
    try:
        ip: Any = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_loopback:
        return True
    return any(_entry_matches(entry, host, port, ip) for entry in no_proxy)


def proxy_for(url: str, settings: ProxySettings) -> Optional[str]:
    """The proxy URL to reach ``url`` through, or None for a direct connection."""
    scheme = urlsplit(url).scheme
    chosen = {"http": settings.http_proxy, "https": settings.https_proxy}.get(scheme, "")
    if not chosen or bypasses(url, settings.no_proxy):
        return None
    return chosen if "://" in chosen else "http://" + chosen


def redacted(proxy_url: str) -> str:
    """The proxy URL without its password, for logs."""
    parts = urlsplit(proxy_url)
    if parts.password is None:
        return proxy_url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()
