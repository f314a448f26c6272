"""Validate an Ignition 3.0.0 .. 3.6.0 config the way Ignition does, with JSON paths.

Two passes over the document: a structural one driven by ``spec.TYPES`` (``structure.py``: JSON
types, unknown keys and keys the declared version lacks: warnings, "unused key", as Ignition
reports them), then the semantic rules of coreos/ignition's config/v3_*/types validators
(``rules_*.py``, with the single-value checks in ``values.py``). Messages follow Ignition's own
wording where it has one, so users can search for them.
"""

from typing import Any, List, Optional

from agent.errors import ConfigError, Problem
from agent.ignition import spec
from agent.ignition.findings import Report, type_name, value_of
from agent.ignition.rules_sections import SectionRules
from agent.ignition.rules_storage import StorageRules
from agent.ignition.rules_systemd import SystemdRules
from agent.ignition.structure import walk


def validate_ignition(doc: Any) -> List[Problem]:
    """Every problem of ``doc`` (errors and warnings), each anchored at its JSON path."""
    r = Report()
    if not isinstance(doc, dict):
        r.error("$", f"an Ignition config must be a JSON object, not {type_name(doc)}", "type")
        return r.problems
    version = _check_version(doc, r)
    declared = version if version else spec.parse_version(spec.NEWEST_VERSION)
    view = walk(doc, "Config", "$", declared, version is not None, r)
    typed = {p.path for p in r.problems if p.rule == "type"}
    before = len(r.problems)
    _Semantic(declared, r).config(view)
    if typed:  # Ignition stops at a decode error: no second finding for the same value
        r.problems[before:] = [p for p in r.problems[before:] if p.path not in typed]
    return r.problems


def errors_of(problems: List[Problem]) -> List[Problem]:
    return [p for p in problems if p.is_error]


def check_ignition(doc: Any, source: str = "") -> List[Problem]:
    """validate_ignition, raising ConfigError when there is any error."""
    problems = validate_ignition(doc)
    errs = errors_of(problems)
    if errs:
        raise ConfigError(f"invalid Ignition config ({len(errs)} error{'s' if len(errs) > 1 else ''})",
                          problems=problems, source=source)
    return problems


# -- version -----------------------------------------------------------------------------------

def _go_get(d: dict, name: str) -> Any:
    """d[name] as Go's decoder finds it: the last key equal to ``name`` ignoring case."""
    found = d.get(name)
    for key, value in d.items():
        if key != name and isinstance(key, str) and key.lower() == name:
            found = value
    return found


def _check_version(doc: dict, r: Report) -> Optional[spec.Version]:
    ign = _go_get(doc, "ignition")
    path = "$.ignition.version"
    if ign is None or (isinstance(ign, dict) and _go_get(ign, "version") is None):
        r.error(path, "config version is required (e.g. \"3.4.0\")", "version-missing")
        return None
    if not isinstance(ign, dict):
        return None  # the structural pass reports the type
    text = _go_get(ign, "version")
    if not isinstance(text, str):
        return None
    if text in spec.EXPERIMENTAL_VERSIONS:
        # Ignition accepts it (config/v3_7_experimental/config.go); it has the fields of the
        # newest stable spec, which we check it with; we never produce or serve it
        r.warn(path, f"spec {text} is experimental: checked as {spec.NEWEST_VERSION}; it may change "
               "without notice, so do not use it in production", "version-experimental", text)
        return spec.parse_version(spec.NEWEST_VERSION)
    v = spec.parse_version(text)
    if v is None:
        r.error(path, "invalid config version (couldn't parse)", "version-invalid", text)
        return None
    if v[0] < 3:
        r.error(path, f"spec {text} is a {v[0]}.x config, which is not supported: translate it to spec 3.x "
                "(e.g. with ign-converter, or rewrite it in Butane)", "version-2x", text)
        return None
    if text not in spec.SUPPORTED_VERSIONS:
        r.error(path, "unsupported config version; supported: " + ", ".join(spec.SUPPORTED_VERSIONS),
                "version-unsupported", text)
        return None
    return v



class _Semantic(SectionRules, StorageRules, SystemdRules):
    """Every semantic rule, section by section."""

    def config(self, doc: dict) -> None:
        ign = value_of(doc, "ignition", "dict") or {}
        self.ignition(ign)
        storage = value_of(doc, "storage", "dict") or {}
        systemd = value_of(doc, "systemd", "dict") or {}
        passwd = value_of(doc, "passwd", "dict") or {}
        self.storage(storage)
        self.systemd(systemd)
        self.passwd(passwd)
        self.kernel_arguments(value_of(doc, "kernelArguments", "dict") or {})
        self.systemd_conflicts(storage, systemd)
