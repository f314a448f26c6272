"""Agent settings: ``/etc/node-agent/agent.yaml`` (camelCase keys), with defaults and validation.

A missing file means "all defaults", so a node boots with no settings at all. Any value that is
present must be right: a wrong type or range is a ConfigError naming the file, the field path
(``fetch.attemptTimeout``) and what is expected, never a silent fallback. Unknown keys are
logged as warnings (a typo must not pass unnoticed, but a newer file must not stop an older agent).
``examples/agent.yaml`` documents every field; keep the two in step.
"""

import logging
import math
import socket
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Optional, Tuple

import yaml

from agent.core.names import NODE_NAME_RULE, is_node_name
from agent.core.proxyrules import ProxySettings, check_proxy_url
from agent.errors import ConfigError, Problem
from agent.ignition.yamlsafe import safe_load

log = logging.getLogger(__name__)

DEFAULT_PATH = "/etc/node-agent/agent.yaml"



def default_node_name() -> str:
    return socket.gethostname().strip().lower() or "localhost"


@dataclass(frozen=True)
class FetchSettings:
    # 0 = no limit: at first boot there is nothing better to do than keep trying (as Ignition).
    total_timeout: float = 0.0
    # Per attempt: connecting, then waiting for the response headers, and each read of the body.
    attempt_timeout: float = 10.0
    initial_delay: float = 0.2
    max_delay: float = 5.0
    # A server's Retry-After is honoured up to this many seconds (a misconfigured server must not
    # park a node for hours).
    max_retry_after: float = 60.0


KUBELET_CLIENT_CERT = "/var/lib/kubelet/pki/kubelet-client-current.pem"


@dataclass(frozen=True)
class ReportSettings:
    token_file: str = ""  # bearer token for the config server's API; "" = send none
    retry_interval: float = 30.0
    # The kubelet's client certificate and key (one PEM, as a bootstrapped kubelet keeps them),
    # presented to the config server once it exists: it proves the node's name (agent/node/kubeletcert.py).
    kubelet_cert_file: str = KUBELET_CLIENT_CERT


@dataclass(frozen=True)
class UpdateSettings:
    interval: float = 60.0  # day-2 poll of the pool's config
    drain_timeout: float = 600.0


@dataclass(frozen=True)
class Settings:
    node_name: str = field(default_factory=default_node_name)
    state_dir: str = "/var/lib/node-agent"
    fetch: FetchSettings = field(default_factory=FetchSettings)
    report: ReportSettings = field(default_factory=ReportSettings)
    update: UpdateSettings = field(default_factory=UpdateSettings)
    # HTTP(S) proxy for every request (agent.resource.proxy); "" / () = the environment's or none.
    proxy: ProxySettings = field(default_factory=ProxySettings)


# --- checks: each returns None when fine, or what was expected -----------------------------------

def _number(low: float, high: float = math.inf, low_open: bool = False) -> Callable[[Any], Optional[str]]:
    low_text = f"> {low:g}" if low_open else f">= {low:g}"
    expected = f"a number of seconds {low_text}" + ("" if high == math.inf else f" and <= {high:g}")

    def check(value: Any) -> Optional[str]:
        # YAML's true/false are ints to Python; a boolean here is always a mistake.
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return expected
        try:
            seconds = float(value)  # what is kept; an integer past float's range is no number of seconds
        except OverflowError:
            return expected
        if math.isnan(seconds) or seconds < low or (low_open and seconds == low) or seconds > high:
            return expected
        return None

    return check


def _abs_path(allow_empty: bool) -> Callable[[Any], Optional[str]]:
    expected = "an absolute path" + (" or empty" if allow_empty else "")

    def check(value: Any) -> Optional[str]:
        if value is None and allow_empty:
            return None
        if not isinstance(value, str):
            return expected
        if value == "":
            return None if allow_empty else expected
        if not value.startswith("/") or "\0" in value:
            return expected
        return None

    return check


def _proxy_url(value: Any) -> Optional[str]:
    """check_proxy_url, for any value: urlsplit raises ValueError on some text ("http://[",
    a host that NFKC normalisation changes), which is no proxy URL either."""
    try:
        return check_proxy_url(value)
    except ValueError:
        return "an http:// or https:// proxy URL (http://host:port), or empty"


def _host_list(value: Any) -> Optional[str]:
    if value is None or (isinstance(value, list) and all(isinstance(v, str) and v.strip() for v in value)):
        return None
    return "a list of host names, domains (.example.com), IP addresses or CIDRs"


def _node_name(value: Any) -> Optional[str]:
    if not is_node_name(value):
        return NODE_NAME_RULE
    return None


# (YAML path, attribute path, check). The one table for parsing, validation and the docs' field names.
_FIELDS: List[Tuple[str, Tuple[str, ...], Callable[[Any], Optional[str]]]] = [
    ("nodeName", ("node_name",), _node_name),
    ("stateDir", ("state_dir",), _abs_path(False)),
    ("fetch.totalTimeout", ("fetch", "total_timeout"), _number(0)),
    ("fetch.attemptTimeout", ("fetch", "attempt_timeout"), _number(0, 3600, low_open=True)),
    ("fetch.initialDelay", ("fetch", "initial_delay"), _number(0, 3600, low_open=True)),
    ("fetch.maxDelay", ("fetch", "max_delay"), _number(0, 3600, low_open=True)),
    ("fetch.maxRetryAfter", ("fetch", "max_retry_after"), _number(0, 86400)),
    ("report.tokenFile", ("report", "token_file"), _abs_path(True)),
    ("report.retryInterval", ("report", "retry_interval"), _number(0, 86400, low_open=True)),
    ("report.kubeletCertFile", ("report", "kubelet_cert_file"), _abs_path(True)),
    ("update.interval", ("update", "interval"), _number(0, 86400, low_open=True)),
    ("update.drainTimeout", ("update", "drain_timeout"), _number(0, 86400, low_open=True)),
    ("proxy.httpProxy", ("proxy", "http_proxy"), _proxy_url),
    ("proxy.httpsProxy", ("proxy", "https_proxy"), _proxy_url),
    ("proxy.noProxy", ("proxy", "no_proxy"), _host_list),
]
_SECTIONS = {"fetch", "report", "update", "proxy"}


def _walk_unknown(data: Dict[str, Any], known: set, prefix: str = "") -> List[str]:
    unknown = []
    for key, value in data.items():
        name = f"{prefix}{key}"
        if name in known:
            continue
        if isinstance(key, str) and not prefix and key in _SECTIONS and isinstance(value, dict):
            unknown += _walk_unknown(value, known, f"{key}.")
        else:
            unknown.append(name)
    return unknown


def parse_settings(data: Any, source: str = "") -> Settings:
    """Settings from already-loaded YAML data (pure). ``None`` (an empty file) means all defaults."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"settings must be a YAML mapping (key: value), got {type(data).__name__}",
                          [Problem("$", "expected a mapping", "settings-type", source=source)], source)
    problems: List[Problem] = []
    for section in sorted(_SECTIONS):
        if section in data and data[section] is not None and not isinstance(data[section], dict):
            problems.append(Problem(section, "expected a mapping of settings", "settings-type",
                                    value=data[section], source=source))

    sections: Dict[str, Dict[str, Any]] = {"": {}}
    for yaml_path, attrs, check in _FIELDS:
        parts = yaml_path.split(".")
        holder: Any = data
        for part in parts[:-1]:
            holder = holder.get(part) if isinstance(holder, dict) else None
        if not isinstance(holder, dict) or parts[-1] not in holder:
            continue
        value = holder[parts[-1]]
        expected = check(value)
        if expected:
            problems.append(Problem(yaml_path, f"expected {expected}", "settings-value", value=value,
                                    source=source))
            continue
        if value is None:
            value = ""
        if isinstance(value, int) and not isinstance(value, bool) and attrs[0] != "node_name":
            value = float(value)
        sections.setdefault(attrs[0] if len(attrs) == 2 else "", {})[attrs[-1]] = value

    defaults = Settings()
    fetch = replace(defaults.fetch, **sections.get("fetch", {}))
    if fetch.max_delay < fetch.initial_delay:
        problems.append(Problem("fetch.maxDelay", f"expected a number >= fetch.initialDelay ({fetch.initial_delay:g})",
                                "settings-value", value=fetch.max_delay, source=source))
    if problems:
        where = f" in {source}" if source else ""
        raise ConfigError(f"invalid agent settings{where}: fix the fields below (see examples/agent.yaml)",
                          problems, source)

    known = {f[0] for f in _FIELDS}
    for name in _walk_unknown(data, known):
        log.warning("%s: unknown setting %r ignored (known: %s)", source or "settings", name,
                    ", ".join(sorted(known)), extra={"NODE_AGENT_STAGE": "settings"})

    return replace(
        defaults,
        fetch=fetch,
        report=replace(defaults.report, **sections.get("report", {})),
        update=replace(defaults.update, **sections.get("update", {})),
        proxy=_proxy(sections.get("proxy", {})),
        **sections[""],
    )


def _proxy(values: Dict[str, Any]) -> ProxySettings:
    no_proxy = values.get("no_proxy") or ()
    return ProxySettings(values.get("http_proxy") or "", values.get("https_proxy") or "",
                         tuple(e.strip() for e in no_proxy))


def parse_settings_file(raw: bytes, config_path: str) -> Settings:
    """The settings in the bytes of the file at ``config_path`` (named in every error)."""
    try:
        data = safe_load(raw.decode("utf-8"))  # only YAMLError, whatever the text
    except UnicodeDecodeError as exc:
        raise ConfigError(f"settings file {config_path} is not UTF-8 text: {exc}", source=config_path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"settings file {config_path} is not valid YAML{where}: {problem}",
                          [Problem("$", f"invalid YAML{where}: {problem}", "settings-yaml", source=config_path)],
                          config_path)
    return parse_settings(data, config_path)
