"""Every document node-agent reads, checked by its kind with its consumer's own rules (pure).

``node-agent validate FILE`` calls ``check_document``. Nothing is checked twice in two ways:
each kind runs the function its consumer runs.

| kind | recognised by | the rules (and their consumer) |
|---|---|---|
| Ignition | ``ignition`` key, no config server reference | ``core.loadconfig.check_node_config`` (first boot, update) |
| Pointer | ``ignition.config.merge``/``replace`` with a source | the same, plus what ``resource.pointer`` and ``core.pool`` need |
| MachineConfig | ``kind``, or ``apiVersion``/``spec`` | ``core.loadconfig.check_node_config`` (the agent, ``plan``) |
| MachineConfigPool, MachineOSConfig, MachineOSBuild | ``kind`` | ``core.objectchecks`` (the server's state loader) |
| MachineConfiguration | ``kind`` | ``core.objectchecks.check_cluster``: node disruption policy (``core.nodedisruption``), ``bootImageSkewEnforcement`` |
| AgentSettings (agent.yaml) | only settings keys | ``core.settings.parse_settings_file`` |
| SkewRules | only skew rules keys, with ``mode`` | ``core.skewrules.parse_rules`` (``node-agent skew``, first boot) |
"""

from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.errors import ConfigError, Problem

IGNITION = "Ignition"
POINTER = "Pointer"
MACHINE_CONFIG = "MachineConfig"
POOL = "MachineConfigPool"
CLUSTER = "MachineConfiguration"
OS_CONFIG = "MachineOSConfig"
OS_BUILD = "MachineOSBuild"
SETTINGS = "AgentSettings"
SKEW_RULES = "SkewRules"
KINDS = (IGNITION, POINTER, MACHINE_CONFIG, POOL, CLUSTER, OS_CONFIG, OS_BUILD, SETTINGS, SKEW_RULES)
ALIASES = {"agent.yaml": SETTINGS, "settings": SETTINGS, "skew": SKEW_RULES, "rules": SKEW_RULES,
           "ign": IGNITION, "mc": MACHINE_CONFIG, "mcp": POOL}
_OBJECT_KINDS = (MACHINE_CONFIG, POOL, CLUSTER, OS_CONFIG, OS_BUILD)  # the ones a ``kind:`` names


def known_kinds() -> str:
    return ", ".join(KINDS) + " (agent.yaml = AgentSettings)"


def kind_named(name: str) -> Optional[str]:
    """The kind ``--kind NAME`` means (case-insensitive, aliases too), else None."""
    low = name.strip().lower()
    for kind in KINDS:
        if kind.lower() == low:
            return kind
    return ALIASES.get(low)


def _text(data: bytes, source: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{source}: not UTF-8 text: {exc}", source=source) from None


def _config_refs(doc: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """(JSON path, reference) of every ``ignition.config`` replace/merge entry."""
    ign = doc.get("ignition")
    refs = ign.get("config") if isinstance(ign, dict) else None
    if not isinstance(refs, dict):
        return []
    out: List[Tuple[str, Any]] = []
    if refs.get("replace") is not None:
        out.append(("$.ignition.config.replace", refs.get("replace")))
    merge = refs.get("merge")
    if isinstance(merge, list):
        out.extend((f"$.ignition.config.merge.{i}", ref) for i, ref in enumerate(merge))
    return out


def _is_settings(doc: Dict[str, Any], source: str) -> bool:
    """agent.yaml by name, or by a settings key and nothing of another kind (a typo is a warning)."""
    from agent.core.settings import _FIELDS, _SECTIONS

    if source.replace("\\", "/").rsplit("/", 1)[-1] == "agent.yaml":
        return True
    top = {f[0].split(".")[0] for f in _FIELDS} | _SECTIONS
    return any(isinstance(k, str) and k in top for k in doc) and not {"kind", "apiVersion", "spec"} & set(doc)


def _is_skew_rules(doc: Dict[str, Any]) -> bool:
    from agent.core.skewrules import _TOP_KEYS

    return "mode" in doc and all(isinstance(k, str) and k in _TOP_KEYS for k in doc)


def detect_kind(doc: Any, source: str = "") -> Optional[str]:
    """The kind of a parsed document by its ``kind:`` or its shape (an agent.yaml by its file name
    too); None when it cannot be told."""
    if not isinstance(doc, dict):
        return None
    kind = doc.get("kind")
    if kind is not None:
        return kind if kind in _OBJECT_KINDS else None
    if "ignition" in doc:
        return POINTER if any(isinstance(r, dict) and r.get("source") for _, r in _config_refs(doc)) else IGNITION
    if _is_skew_rules(doc):
        return SKEW_RULES
    if _is_settings(doc, source):
        return SETTINGS
    if "apiVersion" in doc or "spec" in doc:
        return MACHINE_CONFIG  # as the agent reads it (core.loadconfig.is_machineconfig)
    return IGNITION if not doc else None


def _parse(data: bytes, source: str) -> Any:
    from agent.ignition.parse import parse_document_with_warnings

    doc, _warnings = parse_document_with_warnings(data, source)
    return doc


def check_document(data: bytes, source: str, kind: Optional[str] = None) -> Tuple[bool, str, List[Problem]]:
    """(valid, the kind checked, every problem with its JSON path and line/column where known).

    ``kind`` (one of KINDS) overrides recognition. Syntax errors raise ConfigError, as
    ``core.loadconfig.check_node_config`` does.
    """
    from agent.ignition.positions import with_positions

    if kind is None:
        doc = _parse(data, source)
        if _is_list(doc):
            valid, kind, problems = _check_list(doc, source)
            return valid, kind, with_positions(problems, data)
        kind = detect_kind(doc, source)
        if kind is None and (not isinstance(doc, dict) or (_json_object(data) and "kind" not in doc)):
            kind = IGNITION  # JSON is Ignition's format: it says what an Ignition config lacks
        if kind is None:
            return False, "", [_unknown_kind(doc, source)]
    if kind in (IGNITION, MACHINE_CONFIG):
        wrong = _named_wrong(data, source, kind)
        if wrong:
            return False, kind, with_positions(wrong, data)
        nc, problems = _node_config(data, source)
        return nc is not None, kind, problems
    problems = [_rooted(p, source) for p in _CHECKS[kind](data, source)]
    problems = with_positions(problems, data)
    return not any(p.is_error for p in problems), kind, problems


def _named_wrong(data: bytes, source: str, kind: str) -> List[Problem]:
    """``--kind`` Ignition or MachineConfig for a document that is the other (check_node_config goes
    by the shape)."""
    from agent.core.loadconfig import is_machineconfig

    doc = _parse(data, source)
    if kind == MACHINE_CONFIG and isinstance(doc, dict) and not is_machineconfig(doc):
        return [Problem("$.kind", "expected MachineConfig", "kind", value=doc.get("kind"), source=source)]
    if kind == IGNITION and is_machineconfig(doc):
        return [Problem("$", "a MachineConfig, not an Ignition config (its spec.config is one)", "kind",
                        source=source)]
    return []


def _json_object(data: bytes) -> bool:
    return data[:4096].decode("utf-8", "replace").lstrip(" \t\r\n\ufeff")[:1] == "{"


def _rooted(p: Problem, source: str) -> Problem:
    from dataclasses import replace

    path = p.path if p.path.startswith("$") else "$." + p.path
    return replace(p, path=path, source=p.source or source)


def _unknown_kind(doc: Any, source: str) -> Problem:
    if isinstance(doc, dict) and doc.get("kind") is not None:
        return Problem("$.kind", f"unknown kind: known kinds are {known_kinds()}", "kind",
                       value=doc.get("kind"), source=source)
    return Problem("$", f"cannot tell what this document is: name its kind (kind: ... or --kind) - known "
                        f"kinds are {known_kinds()}", "kind", source=source)


def _node_config(data: bytes, source: str):
    from agent.core.loadconfig import check_node_config

    return check_node_config(data, source)


def _errors_of(call: Callable[[], Any]) -> List[Problem]:
    """The problems a consumer's parser raises (ConfigError), or none."""
    try:
        call()
    except ConfigError as exc:
        return list(exc.problems) or [Problem("$", str(exc), "invalid")]
    return []


def _check_pointer(data: bytes, source: str) -> List[Problem]:
    """As Ignition, plus what resolving it needs (``resource.pointer``, ``core.pool``): a source in
    every reference, and the config server's ``/config/<pool>`` URL the node joins and reports to."""
    from agent.core.objectchecks import DNS1123_LABEL
    from agent.core.pool import pool_from_url

    _nc, problems = _node_config(data, source)
    doc = _parse(data, source)
    refs = _config_refs(doc) if isinstance(doc, dict) else []
    if not refs:
        return problems + [Problem("$.ignition.config", "a pointer config names the config server in "
                                   "ignition.config.merge or ignition.config.replace", "pointer", source=source)]
    pools = []
    for path, ref in refs:
        url = ref.get("source") if isinstance(ref, dict) else None
        if not isinstance(url, str) or not url:
            problems.append(Problem(path + ".source", "expected a URL (the pointer resolves every reference)",
                                    "resource-source", source=source))
            continue
        pool = pool_from_url(url)
        if pool is not None and not DNS1123_LABEL.match(pool):
            problems.append(Problem(path + ".source", "names no pool the server can have: a pool name is a "
                                    "DNS-1123 label", "pointer-pool", value=pool, source=source))
        pools.append(pool)
    if refs[0][0].endswith("replace") and len(refs) > 1:
        problems.append(Problem("$.ignition.config.merge", "ignored: replace is set (as Ignition does)",
                                "pointer", severity="warning", source=source))
    if not any(pools):
        problems.append(Problem(refs[0][0] + ".source", "no http(s)://HOST/config/<pool> URL: the pool must then "
                                "come from the served annotations, and the node cannot report to the server",
                                "pointer-pool", severity="warning", source=source))
    return problems


def _check_settings(data: bytes, source: str) -> List[Problem]:
    from agent.core.settings import _FIELDS, _walk_unknown, parse_settings_file
    from agent.ignition.yamlsafe import safe_load

    found = _errors_of(lambda: parse_settings_file(data, source))
    if found:
        return found
    doc = safe_load(_text(data, source))
    known = {f[0] for f in _FIELDS}
    unknown = _walk_unknown(doc, known) if isinstance(doc, dict) else []
    return [Problem(str(name), f"unknown setting, ignored (known: {', '.join(sorted(known))})", "settings-unknown",
                    severity="warning", source=source) for name in unknown]


def _check_skew_rules(data: bytes, source: str) -> List[Problem]:
    from agent.core.skewrules import load_rules_text, parse_rules

    return _errors_of(lambda: parse_rules(load_rules_text(_text(data, source), source), source))


def _check_object(kind: str, doc: Any, source: str) -> List[Problem]:
    """A MachineConfig-family object as the server's state loader checks it (``server.store.statedir``)."""
    from agent.core import objectchecks as oc

    if not isinstance(doc, dict):
        return [Problem("$", f"a {kind} is a mapping", "kind", source=source)]
    if doc.get("kind") not in (None, kind):
        return [Problem("$.kind", f"expected {kind}", "kind", value=doc.get("kind"), source=source)]
    if kind == CLUSTER:  # the server reads machineconfiguration.yaml with no apiVersion check
        return oc.check_cluster(doc, source)
    by_kind = {POOL: oc.check_pool, OS_CONFIG: oc.check_os_config, OS_BUILD: oc._check_named}
    return oc.check_api_version(doc, kind, source) or by_kind[kind](doc, source)


def _object_check(kind: str) -> Callable[[bytes, str], List[Problem]]:
    return lambda data, source: _check_object(kind, _parse(data, source), source)


def _is_list(doc: Any) -> bool:
    """A ``kind: List`` of objects, as the server's state files may hold (``server.store.statefiles``)."""
    return isinstance(doc, dict) and (doc.get("kind") == "List" or (isinstance(doc.get("items"), list)
                                                                     and "spec" not in doc))


def _check_list(doc: Dict[str, Any], source: str) -> Tuple[bool, str, List[Problem]]:
    from dataclasses import replace

    problems: List[Problem] = []
    kinds = []
    for j, item in enumerate(doc.get("items") or []):
        kind = detect_kind(item) if isinstance(item, dict) else None
        if kind not in (POOL, CLUSTER, OS_CONFIG, OS_BUILD, MACHINE_CONFIG):
            found = [_unknown_kind(item, source)]
        elif kind == MACHINE_CONFIG:
            from agent.core.loadconfig import check_node_config

            found = check_node_config(item, source)[1]
        else:
            found = _check_object(kind, item, source)
        kinds.append(kind or "?")
        problems += [replace(p, path=f"$.items.{j}" + p.path[1:]) for p in found]
    return not any(p.is_error for p in problems), "List of " + ", ".join(sorted(set(kinds))), problems


_CHECKS: Dict[str, Callable[[bytes, str], List[Problem]]] = {
    POINTER: _check_pointer,
    SETTINGS: _check_settings,
    SKEW_RULES: _check_skew_rules,
    POOL: _object_check(POOL),
    CLUSTER: _object_check(CLUSTER),
    OS_CONFIG: _object_check(OS_CONFIG),
    OS_BUILD: _object_check(OS_BUILD),
}
