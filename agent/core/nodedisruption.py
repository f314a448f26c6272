"""The node disruption policy itself: parse, validate, the built-in defaults, merge.

MachineConfiguration ``spec.nodeDisruptionPolicy`` (openshift/api types_machineconfiguration.go
NodeDisruptionPolicyConfig): ``files`` (by path, the longest covering directory wins), ``units``
(by name) and ``sshkey``, each a list of actions. The built-in defaults live in
``agent/data/disruption-defaults.yaml`` (data, not code); a user entry replaces the default for
the same path or unit. What a change then needs is ``agent.core.disruption.compute_actions``.
"""

import functools
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from agent.errors import ConfigError, Problem

NONE, REBOOT, DRAIN, RELOAD, RESTART, DAEMON_RELOAD, SPECIAL = (
    "None", "Reboot", "Drain", "Reload", "Restart", "DaemonReload", "Special")
ACTION_TYPES = (NONE, REBOOT, DRAIN, RELOAD, RESTART, DAEMON_RELOAD, SPECIAL)
USER_ACTION_TYPES = (REBOOT, DRAIN, RELOAD, RESTART, DAEMON_RELOAD, NONE)  # Special: built-ins only
MAX_FILES = 50
MAX_UNITS = 50
MAX_ACTIONS = 10
MAX_SERVICE_NAME = 255
UNIT_SUFFIXES = (".service", ".socket", ".device", ".mount", ".automount", ".swap", ".target", ".path",
                 ".timer", ".snapshot", ".slice", ".scope")
# The API's serviceName rule (openshift/api types_machineconfiguration.go NodeDisruptionPolicy*
# ServiceName): letters, digits, ':', '_', '.', '\\' and '-' before the unit suffix; no '@'
# (a template instance is not a name a policy can restart).
_UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\-]+(" + "|".join(re.escape(s) for s in UNIT_SUFFIXES) + r")$")
SPECIAL_UNIT = "crio.service"  # what Special reloads
REGISTRIES_CONF = "/etc/containers/registries.conf"
# Written by the config server for the first boot only (names of rendered configs); they differ
# between any two served configs and are never re-applied on day 2, so they need nothing.
BOOKKEEPING_PATHS = ("/etc/machine-config-daemon/node-annotations.json",
                     "/etc/ignition-machine-config-encapsulated.json",
                     "/etc/mcs-machine-config-content.json")  # upstream server.go machineConfigContentPath

POLICY_PATH = "$.spec.nodeDisruptionPolicy"
DEFAULTS_RESOURCE = "disruption-defaults.yaml"


# --- the policy --------------------------------------------------------------------------------

@dataclass(frozen=True)
class PolicyAction:
    type: str
    service: str = ""  # Reload / Restart only

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"type": self.type}
        if self.type == RELOAD:
            out["reload"] = {"serviceName": self.service}
        elif self.type == RESTART:
            out["restart"] = {"serviceName": self.service}
        return out

    def __str__(self) -> str:
        return f"{self.type} {self.service}" if self.service else self.type


@dataclass(frozen=True)
class PolicyEntry:
    key: str  # a path (files) or a unit name (units)
    actions: Tuple[PolicyAction, ...]
    origin: str = "user"  # "default" or "user"

    def says(self) -> str:
        return ", ".join(str(a) for a in self.actions)


@dataclass(frozen=True)
class Policy:
    files: Tuple[PolicyEntry, ...] = ()
    units: Tuple[PolicyEntry, ...] = ()
    sshkey: Optional[Tuple[PolicyAction, ...]] = None  # None: not set (a user policy without sshkey)

    def file_entry(self, path: str) -> Optional[PolicyEntry]:
        """The entry for ``path`` itself, else for its longest parent directory (the first
        entry of a key wins). O(path depth): the normalised keys are indexed once per policy."""
        index, by_dir = _file_index(self.files)
        path = _norm(path)
        entry = index.get(path)
        if entry is not None or path in ("/", ""):
            return entry
        parent = path[:path.rfind("/")] or "/"  # posixpath.dirname of a normal absolute path
        if parent not in by_dir:  # files share directories: walk up once per directory
            walk = parent
            while True:
                entry = index.get(walk)
                if entry is not None or walk in ("/", ""):
                    break
                walk = walk[:walk.rfind("/")] or "/"
            if len(by_dir) > 65536:
                by_dir.clear()
            by_dir[parent] = entry
        return by_dir[parent]

    def unit_entry(self, name: str) -> Optional[PolicyEntry]:
        for entry in self.units:
            if entry.key == name:
                return entry
        return None

    def to_dict(self) -> Dict[str, Any]:
        return {
            "files": [{"path": e.key, "actions": [a.to_dict() for a in e.actions]} for e in self.files],
            "units": [{"name": e.key, "actions": [a.to_dict() for a in e.actions]} for e in self.units],
            "sshkey": {"actions": [a.to_dict() for a in (self.sshkey or ())]},
        }


_FILE_INDEXES: Dict[int, Tuple[Tuple[PolicyEntry, ...], Tuple[Dict[str, PolicyEntry], Dict[str, Any]]]] = {}


def _file_index(files: Tuple[PolicyEntry, ...]) -> Tuple[Dict[str, PolicyEntry], Dict[str, Any]]:
    """(normalised key -> first entry, directory -> the entry covering it), built once per
    policy (by identity: hashing the policy on every lookup would cost more than the lookup)."""
    hit = _FILE_INDEXES.get(id(files))
    if hit is None or hit[0] is not files:
        index: Dict[str, PolicyEntry] = {}
        for entry in files:
            index.setdefault(_norm(entry.key), entry)
        if len(_FILE_INDEXES) > 32:
            _FILE_INDEXES.clear()
        hit = _FILE_INDEXES[id(files)] = (files, (index, {}))
    return hit[1]


def _norm(path: str) -> str:
    if path[:1] == "/" and "//" not in path and "/." not in path and path[-1] != "/":
        return path  # already normal (most are): normpath would return it unchanged
    return "/" + posixpath.normpath(path).lstrip("/") if path else path


def _problem(problems: List[Problem], path: str, message: str, source: str, value: Any = None) -> None:
    if value is None:
        problems.append(Problem(path, message, rule="node-disruption-policy", source=source))
    else:
        problems.append(Problem(path, message, rule="node-disruption-policy", source=source, value=value))


def _valid_unit_name(name: Any) -> bool:
    return isinstance(name, str) and len(name) <= MAX_SERVICE_NAME and bool(_UNIT_NAME.match(name))


def _parse_actions(raw: Any, where: str, problems: List[Problem], source: str,
                   allowed: Tuple[str, ...]) -> Tuple[PolicyAction, ...]:
    if not isinstance(raw, list):
        _problem(problems, where, "actions must be a list of {type: ...}", source, raw)
        return ()
    if not raw:
        _problem(problems, where, "at least one action is required (use type: None for no action)", source)
    if len(raw) > MAX_ACTIONS:
        _problem(problems, where, f"at most {MAX_ACTIONS} actions are allowed, got {len(raw)}", source)
    out = []
    for i, item in enumerate(raw):
        at = f"{where}.{i}"
        if not isinstance(item, dict):
            _problem(problems, at, "an action must be a mapping with a 'type'", source, item)
            continue
        kind = item.get("type")
        if kind == SPECIAL and kind not in allowed:
            _problem(problems, f"{at}.type", "Special is reserved for the built-in defaults "
                     "(registries.conf); use Reload, Restart, Drain, DaemonReload, Reboot or None", source, kind)
            continue
        if kind not in allowed:
            _problem(problems, f"{at}.type", f"unknown action type; use one of {', '.join(allowed)}", source, kind)
            continue
        unknown = sorted(set(item) - {"type", "reload", "restart"}, key=str)
        if unknown:
            _problem(problems, f"{at}.{unknown[0]}", f"unknown field {unknown[0]!r} in an action", source)
        for other in ("reload", "restart"):
            if other in item and kind.lower() != other:
                _problem(problems, f"{at}.{other}", f"'{other}' is only allowed when type is {other.title()}",
                         source)
        service = ""
        if kind in (RELOAD, RESTART):
            sub = kind.lower()
            body = item.get(sub)
            if not isinstance(body, dict) or "serviceName" not in body:
                _problem(problems, f"{at}.{sub}.serviceName",
                         f"type {kind} needs {sub}.serviceName (the unit to {sub})", source)
                continue
            service = body.get("serviceName")
            if not isinstance(service, str) or len(service) > MAX_SERVICE_NAME:
                _problem(problems, f"{at}.{sub}.serviceName",
                         f"serviceName must be a string of at most {MAX_SERVICE_NAME} characters", source,
                         service if isinstance(service, str) and len(service) < 80 else None)
                continue
            if not _valid_unit_name(service):
                _problem(problems, f"{at}.{sub}.serviceName",
                         "serviceName must be a systemd unit name ending in " + ", ".join(UNIT_SUFFIXES),
                         source, service)
                continue
            unknown = sorted(set(body) - {"serviceName"}, key=str)
            if unknown:
                _problem(problems, f"{at}.{sub}.{unknown[0]}", f"unknown field {unknown[0]!r}", source)
        out.append(PolicyAction(kind, service))
    for alone in (REBOOT, NONE):
        if len(raw) > 1 and any(isinstance(i, dict) and i.get("type") == alone for i in raw):
            _problem(problems, where, f"{alone} must be the only action of an entry", source)
    return tuple(out)


def _parse_entries(raw: Any, where: str, key: str, limit: int, problems: List[Problem], source: str,
                   allowed: Tuple[str, ...], origin: str) -> Tuple[PolicyEntry, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        _problem(problems, where, f"must be a list of {{{key}, actions}}", source, raw)
        return ()
    if len(raw) > limit:
        _problem(problems, where, f"at most {limit} entries are allowed, got {len(raw)}", source)
    out, seen = [], {}
    for i, item in enumerate(raw):
        at = f"{where}.{i}"
        if not isinstance(item, dict):
            _problem(problems, at, f"an entry must be a mapping with {key!r} and 'actions'", source, item)
            continue
        unknown = sorted(set(item) - {key, "actions"}, key=str)
        if unknown:
            _problem(problems, f"{at}.{unknown[0]}", f"unknown field {unknown[0]!r}", source)
        name = item.get(key)
        ok = True
        if key == "path":
            if not isinstance(name, str) or not name.startswith("/"):
                _problem(problems, f"{at}.path", "path must be an absolute path", source, name)
                ok = False
        elif not _valid_unit_name(name):
            _problem(problems, f"{at}.name",
                     "name must be a systemd unit name (at most 255 characters) ending in "
                     + ", ".join(UNIT_SUFFIXES), source, name)
            ok = False
        if "actions" not in item:
            _problem(problems, f"{at}.actions", "actions are required", source)
            continue
        actions = _parse_actions(item["actions"], f"{at}.actions", problems, source, allowed)
        if not ok:
            continue
        norm = _norm(name) if key == "path" else name
        if norm in seen:
            _problem(problems, f"{at}.{key}", f"duplicate {key}: already given at {where}.{seen[norm]}", source,
                     name)
            continue
        seen[norm] = i
        out.append(PolicyEntry(norm, actions, origin))
    return tuple(out)


def parse_policy(doc: Any, *, prefix: str = POLICY_PATH, source: str = "", origin: str = "user") -> Policy:
    """A ``nodeDisruptionPolicy`` mapping -> Policy; ConfigError listing every problem.

    ``origin="default"`` also allows the ``Special`` action (built-ins only, as in the API).
    """
    problems: List[Problem] = []
    allowed = ACTION_TYPES if origin == "default" else USER_ACTION_TYPES
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise ConfigError("invalid node disruption policy",
                          [Problem(prefix, "must be a mapping with files, units and sshkey",
                                   rule="node-disruption-policy", source=source)], source)
    for extra in sorted(set(doc) - {"files", "units", "sshkey"}, key=str):
        _problem(problems, f"{prefix}.{extra}", f"unknown field {extra!r} (expected files, units, sshkey)", source)
    files = _parse_entries(doc.get("files"), f"{prefix}.files", "path", MAX_FILES, problems, source, allowed,
                           origin)
    units = _parse_entries(doc.get("units"), f"{prefix}.units", "name", MAX_UNITS, problems, source, allowed,
                           origin)
    sshkey: Optional[Tuple[PolicyAction, ...]] = None
    raw_ssh = doc.get("sshkey")
    if raw_ssh is not None:
        if not isinstance(raw_ssh, dict) or "actions" not in raw_ssh:
            _problem(problems, f"{prefix}.sshkey", "sshkey must be a mapping with 'actions'", source)
        else:
            for extra in sorted(set(raw_ssh) - {"actions"}, key=str):
                _problem(problems, f"{prefix}.sshkey.{extra}", f"unknown field {extra!r}", source)
            if raw_ssh["actions"] == []:
                # An empty sshkey action list keeps the default (upstream apihelpers.go:499-503).
                sshkey = None
            else:
                sshkey = _parse_actions(raw_ssh["actions"], f"{prefix}.sshkey.actions", problems, source, allowed)
    errors = [p for p in problems if p.is_error]
    if errors:
        raise ConfigError(f"invalid node disruption policy ({len(errors)} problem"
                          f"{'s' if len(errors) != 1 else ''})", problems, source)
    return Policy(files, units, sshkey)


def policy_from_document(doc: Any, source: str = "") -> Policy:
    """The user policy in a MachineConfiguration (``spec.nodeDisruptionPolicy``).

    A bare ``{files, units, sshkey}`` mapping is accepted too (errors then use ``$.files...``).
    """
    if doc is None:
        return Policy()
    if not isinstance(doc, dict):
        raise ConfigError("not a MachineConfiguration",
                          [Problem("$", "expected a MachineConfiguration mapping", source=source)], source)
    kind = doc.get("kind")
    if kind is not None and kind != "MachineConfiguration":
        raise ConfigError(f"expected kind MachineConfiguration, got {kind!r}",
                          [Problem("$.kind", "expected MachineConfiguration", value=kind, source=source)],
                          source)
    if "spec" in doc or "kind" in doc or "apiVersion" in doc:
        spec = doc.get("spec") or {}
        if not isinstance(spec, dict):
            raise ConfigError("invalid MachineConfiguration",
                              [Problem("$.spec", "must be a mapping", source=source)], source)
        return parse_policy(spec.get("nodeDisruptionPolicy"), source=source)
    return parse_policy(doc, prefix="$", source=source)


def load_policy_text(text: Union[str, bytes], source: str = "") -> Policy:
    """MachineConfiguration YAML/JSON text -> the user policy in it (not merged)."""
    import yaml

    from agent.ignition.yamlsafe import safe_load

    try:
        doc = safe_load(text)  # only YAMLError, whatever the text
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError(f"not valid YAML{where}: {getattr(exc, 'problem', exc)}",
                          [Problem("$", f"not valid YAML{where}", source=source)], source)
    return policy_from_document(doc, source)


@functools.lru_cache(maxsize=1)
def default_policy() -> Policy:
    """The built-in policy shipped as ``agent/data/disruption-defaults.yaml``."""
    import yaml

    try:
        from importlib.resources import files

        text = (files("agent") / "data" / DEFAULTS_RESOURCE).read_text(encoding="utf-8")
    except (ImportError, FileNotFoundError, OSError, TypeError):  # pragma: no cover - odd installs
        import os

        with open(os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", DEFAULTS_RESOURCE),
                  encoding="utf-8") as f:
            text = f.read()
    return parse_policy(yaml.safe_load(text), prefix="$", source=DEFAULTS_RESOURCE, origin="default")


def merge(defaults: Policy, user: Policy) -> Policy:
    """Defaults first; a user entry for the same path/unit replaces the default in place; other
    user entries are appended in their order; a user sshkey entry replaces the default."""

    def _merge(base: Tuple[PolicyEntry, ...], over: Tuple[PolicyEntry, ...]) -> Tuple[PolicyEntry, ...]:
        by_key = {e.key: e for e in over}
        out = [by_key.pop(e.key, e) for e in base]
        out.extend(e for e in over if e.key in by_key)
        return tuple(out)

    return Policy(
        files=_merge(defaults.files, user.files),
        units=_merge(defaults.units, user.units),
        sshkey=user.sshkey if user.sshkey is not None else defaults.sshkey,
    )


def effective_policy(user: Optional[Policy] = None) -> Policy:
    return merge(default_policy(), user or Policy())


def merge_policy(node_disruption_policy: Any, source: str = "") -> Policy:
    """A ``spec.nodeDisruptionPolicy`` mapping (or None) -> the effective policy (ConfigError if invalid)."""
    return effective_policy(parse_policy(node_disruption_policy, source=source))
