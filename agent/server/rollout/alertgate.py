"""A pool's alert gate (ours; pure): no node of the pool is newly targeted while a Prometheus alert
whose name matches the pool's pattern fires.

kured's ``--prometheus-url``, ``--alert-filter-regexp``, ``--alert-filter-match-only`` and
``--alert-firing-only`` (kubereboot/kured at e1026ae0, pkg/blockers/prometheus.go:82-113
``ActiveAlerts``, which queries ``ALERTS`` and keeps an alert whose name the filter matches, or
does not match: ``matchesRegex``, :115-121; a query error blocks the reboot and at most 10 names
are said: ``IsBlocked``, :54-69), per pool:

- the MachineConfigPool annotation ``node-config-server.openshift.io/alert-gate`` holds a
  regular expression over alert names (agent/server/rollout/alertregex.py: anchored at both ends,
  as a Prometheus ``=~`` matcher; linear-time). A *matching* alert gates (kured's
  ``--alert-filter-match-only``), so the pattern names what to wait for;
- only *firing* alerts gate (kured's ``--alert-firing-only``): a pending one has not held for its
  rule's ``for:`` yet, and a flapping expression should not stop a rollout;
- the shell (agent/server/cluster/alertsource.py) asks ``serve --prometheus-url``'s
  ``/api/v1/alerts`` and hands the firing names here (``Firing``), or why it has no answer.

Fail closed: a pattern that does not compile holds the pool; so does a Prometheus that does not
answer (and a gated pool on a server started without ``--prometheus-url``). The annotation
``node-config-server.openshift.io/alert-gate-unreachable: proceed`` lets the rollout go on while
Prometheus does not answer (the pool still says so); ``hold`` is the default.
"""

import functools
import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from agent.core.rolloutpolicy import PREFIX, pool_annotations
from agent.server.rollout.alertregex import MAX_PATTERN, Pattern, PatternInvalid

ANNOTATION = PREFIX + "alert-gate"
UNREACHABLE = PREFIX + "alert-gate-unreachable"
UNREACHABLE_VALUES = ("hold", "proceed")
LISTED = 10  # alert names a pool names in its status (the count is whole)
MAX_NAME = 200  # characters of an alert name kept: longer ones are cut (Prometheus names are short)
MAX_ALERTS = 10_000  # alerts read from one answer; past it the answer is refused
NO_URL = ("this server was started without --prometheus-url, so it cannot tell whether an alert fires: give "
          "serve --prometheus-url URL, or remove the annotation")
EXAMPLE = "KubeNodeNotReady|Etcd.*|NodeFilesystem.*"


class AlertGateInvalid(ValueError):
    """An annotation that does not parse; the message names the annotation and what to give."""


class AlertsUnreadable(ValueError):
    """Prometheus's answer is not an alerts list; the message says what it is instead."""


@dataclass(frozen=True)
class Firing:
    """What the shell learnt: the names of the firing alerts (sorted, unique), or why it has none
    (``unanswered``: Prometheus did not answer, answered an error, or no URL was given)."""
    names: Tuple[str, ...] = ()
    unanswered: str = ""
    starting: bool = False  # not asked yet (serve's first render): holds, whatever the override


@dataclass(frozen=True)
class Gate:
    pattern: Pattern
    proceed_unanswered: bool  # alert-gate-unreachable: proceed


def gated(pool: Mapping[str, Any]) -> bool:
    """Whether the pool has an alert gate (valid or not): only then is Prometheus asked."""
    return pool_annotations(pool).get(ANNOTATION) is not None


def parse(value: Any, unreachable: Any = None) -> Gate:
    """The gate of the two annotations' values; AlertGateInvalid naming the annotation otherwise."""
    if not isinstance(value, str):
        raise AlertGateInvalid(f"annotation {ANNOTATION}: the value is not text: give a regular expression over "
                               f"alert names, e.g. {EXAMPLE} (docs/rollout.md, \"Alert gates\")")
    if not value.strip():
        raise AlertGateInvalid(f"annotation {ANNOTATION}: the value is empty: give a regular expression over alert "
                               f"names, e.g. {EXAMPLE}, or remove the annotation")
    try:
        pattern = _compiled(value.strip())
    except PatternInvalid as exc:
        raise AlertGateInvalid(f"annotation {ANNOTATION}: {str(value)[:80]!r}{'...' if len(value) > 80 else ''} is "
                               f"not a pattern this server reads: {exc} (e.g. {EXAMPLE}; at most {MAX_PATTERN} "
                               f"characters; docs/rollout.md, \"Alert gates\")") from None
    choice = "hold" if unreachable is None else unreachable
    if not isinstance(choice, str) or choice.strip().lower() not in UNREACHABLE_VALUES:
        raise AlertGateInvalid(f"annotation {UNREACHABLE}: {str(choice)[:40]!r} is not hold or proceed: give hold "
                               f"(the default: the pool waits while Prometheus does not answer) or proceed")
    return Gate(pattern, choice.strip().lower() == "proceed")


def firing_names(doc: Any) -> Tuple[str, ...]:
    """The names of the firing alerts in Prometheus's ``GET /api/v1/alerts`` answer
    (``{"status": "success", "data": {"alerts": [{"labels": {"alertname": ...}, "state": "firing"}]}}``;
    states ``pending`` and ``firing``), sorted and unique; AlertsUnreadable otherwise."""
    if not isinstance(doc, Mapping):
        raise AlertsUnreadable("the answer is not a JSON object")
    if doc.get("status") != "success":
        why = doc.get("error") if isinstance(doc.get("error"), str) else "no error given"
        raise AlertsUnreadable(f"status {str(doc.get('status'))[:40]!r}: {why[:200]}")
    data = doc.get("data")
    alerts = data.get("alerts") if isinstance(data, Mapping) else None
    if not isinstance(alerts, list):
        raise AlertsUnreadable("data.alerts is not a list (is the URL a Prometheus, or an Alertmanager?)")
    if len(alerts) > MAX_ALERTS:
        raise AlertsUnreadable(f"{len(alerts)} alerts: more than this server reads ({MAX_ALERTS})")
    names = set()
    for alert in alerts:
        labels = alert.get("labels") if isinstance(alert, Mapping) else None
        name = labels.get("alertname") if isinstance(labels, Mapping) else None
        if isinstance(name, str) and alert.get("state") == "firing":
            names.add(name[:MAX_NAME])
    return tuple(sorted(names))


def parse_answer(body: bytes) -> Tuple[str, ...]:
    """``firing_names`` of a raw answer; AlertsUnreadable when it is not JSON."""
    try:
        doc = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise AlertsUnreadable("the answer is not JSON") from None
    return firing_names(doc)


@functools.lru_cache(maxsize=64)
def _compiled(text: str) -> Pattern:
    return Pattern(text)


@functools.lru_cache(maxsize=256)
def _matching(pattern: Pattern, names: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(n for n in names if pattern.fullmatch(n))


def matching(gate: Gate, names: Tuple[str, ...]) -> List[str]:
    """The names the gate's pattern matches (each step asks again: the same answer costs nothing)."""
    return list(_matching(gate.pattern, names))


def _named(names: List[str]) -> str:
    more = len(names) - LISTED
    return ", ".join(names[:LISTED]) + (f" and {more} more" if more > 0 else "")


def state(pool: Mapping[str, Any], firing: Optional[Firing]) -> Tuple[str, Optional[Dict[str, Any]]]:
    """(the hold: why nobody is newly targeted now, "" when nothing holds; the record for the
    pool's ``status.rollout.alerts``, None without the annotation). ``firing`` None: the server
    has no ``--prometheus-url``."""
    ann = pool_annotations(pool)
    if ann.get(ANNOTATION) is None:
        return "", None
    try:
        gate = parse(ann[ANNOTATION], ann.get(UNREACHABLE))
    except AlertGateInvalid as exc:
        return (f"the pool's alert gate is invalid, so nothing is newly targeted until it is fixed: {exc}",
                {"invalid": str(exc), "holding": True})
    record: Dict[str, Any] = {"pattern": gate.pattern.text}
    if firing is None or firing.unanswered:
        why = NO_URL if firing is None else firing.unanswered if firing.starting else \
            f"Prometheus did not answer: {firing.unanswered}"
        record["unanswered"] = why
        if gate.proceed_unanswered and firing is not None and not firing.starting:
            return "", {**record, "holding": False, "override": f"{UNREACHABLE}: proceed"}
        return (f"the pool's alert gate ({gate.pattern.text}) cannot tell whether an alert fires, so nothing is "
                f"newly targeted (fail closed): {why}"
                + ("" if firing is None or firing.starting else f" (annotate the pool {UNREACHABLE}=proceed to go on without it)"),
                {**record, "holding": True})
    names = matching(gate, firing.names)
    if not names:
        return "", {**record, "holding": False, "firing": [], "count": 0}
    return (f"alerts fire that the pool's alert gate ({gate.pattern.text}) waits for: {_named(names)}; nothing is "
            f"newly targeted until they stop"), {**record, "holding": True, "firing": names[:LISTED],
                                                 "count": len(names)}
