"""A pool's rollout policy beyond ``maxUnavailable`` (ours; pure): read from the
MachineConfigPool's annotations, checked with the pool (agent/core/objectchecks.py) so that a bad
value is a clear error naming the annotation, and read by the server's targeting
(agent/server/rollout/targeting.py).

| annotation on the MachineConfigPool | value | default (upstream's behaviour) |
|---|---|---|
| ``node-config-server.openshift.io/failure-budget`` | N >= 1: the rollout halts once N nodes failed on the pool's target; a failed node holds no slot and retries only in a free one | none: failing nodes take capacity, so ``maxUnavailable`` failures halt it (getAllCandidateMachines) |
| ``node-config-server.openshift.io/canary-nodes`` | N >= 0: target only the first N nodes of a new target ... | 0: no canary phase |
| ``node-config-server.openshift.io/canary-wait`` | ... then wait this long after they are Done and Ready before the rest: ``600``, ``90s``, ``10m``, ``1h30m`` | 0 |
| ``node-config-server.openshift.io/require-ack`` | ``warnings``, ``file-removal``, ``reboot`` (comma-separated), ``all`` or ``none``: a new rendering with validator warnings, that removes a file or needs a reboot is held until the admin acknowledges it (agent/server/rollout/review.py) | none: every rendering is the target at once |
| ``node-config-server.openshift.io/acknowledged`` | the rendered config the admin acknowledges (as ``node-config-server ack pool NAME`` does) | |
| ``node-config-server.openshift.io/health-timeout`` | how long a node's health checks after an update may take: ``300``, ``90s``, ``10m`` (at most 1h); served to the node with its config (``X-Health-Timeout``) | 5m (agent/core/health.py) |

And on a Node (or, without Node objects, among the labels a node reports or the admin approved):
``node-config-server.openshift.io/rollout-priority``: a whole number; nodes with a higher one are
targeted first (a canary group: ``oc label node w1 w2 node-config-server.openshift.io/rollout-priority=10``);
within one priority, upstream's order (zone, then oldest first).

The pool's ``node-config-server.openshift.io/maintenance-window`` (when nodes may be newly
targeted) is read by agent/server/rollout/windows.py, its ``node-config-server.openshift.io/alert-gate``
(alert names that hold it while they fire) and ``...alert-gate-unreachable`` by
agent/server/rollout/alertgate.py: an invalid one holds the pool, which says why.
"""

import re
from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple

PREFIX = "node-config-server.openshift.io/"
FAILURE_BUDGET = PREFIX + "failure-budget"
CANARY_NODES = PREFIX + "canary-nodes"
CANARY_WAIT = PREFIX + "canary-wait"
PRIORITY_LABEL = PREFIX + "rollout-priority"
REQUIRE_ACK = PREFIX + "require-ack"
ACKNOWLEDGED = PREFIX + "acknowledged"
HEALTH_TIMEOUT = PREFIX + "health-timeout"  # the node's health checks after an update (agent/core/health.py)
MAX_HEALTH_TIMEOUT = 3600
REVIEW_KINDS = ("warnings", "file-removal", "reboot")
MAX_PRIORITY = 1_000_000
MAX_WAIT = 7 * 24 * 3600  # a week: longer is surely a typo for minutes
_DURATION = re.compile(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")


@dataclass(frozen=True)
class RolloutPolicy:
    failure_budget: Optional[int] = None  # None: upstream's rule only
    canary_nodes: int = 0
    canary_wait: float = 0.0
    require_ack: Tuple[str, ...] = ()  # of REVIEW_KINDS: what holds a new rendering for the admin
    acknowledged: str = ""  # the rendered config the admin acknowledged by annotation
    health_timeout: Optional[float] = None  # None: the node's default (agent/core/health.py)


def parse_duration(text: str) -> float:
    """Seconds from ``600``, ``90s``, ``10m`` or ``1h30m`` (Go's duration units h, m, s); ValueError otherwise."""
    text = text.strip()
    if text.isdigit():
        seconds = int(text)
    else:
        m = _DURATION.fullmatch(text)
        if not text or m is None:
            raise ValueError(f"{text!r} is not a duration: give seconds (600) or hours, minutes and seconds "
                             f"(1h30m, 10m, 90s)")
        h, mi, s = (int(g or 0) for g in m.groups())
        seconds = h * 3600 + mi * 60 + s
    if seconds > MAX_WAIT:
        raise ValueError(f"{text!r} is longer than a week")
    return float(seconds)


def _whole(text: Any, low: int) -> int:
    if not isinstance(text, str) or not text.strip().isdigit():
        raise ValueError(f"{text!r} is not a whole number")
    value = int(text)
    if value < low or value > MAX_PRIORITY:
        raise ValueError(f"{value} is out of range ({low} to {MAX_PRIORITY})")
    return value


def parse_review_kinds(value: Any) -> Tuple[str, ...]:
    """``warnings,reboot`` -> ("warnings", "reboot"); ``all``, ``none`` (or empty); ValueError naming the words."""
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a list of {', '.join(REVIEW_KINDS)} (or all, none)")
    words = [w.strip().lower() for w in value.split(",") if w.strip()]
    if words == ["all"]:
        return REVIEW_KINDS
    if words in ([], ["none"]):
        return ()
    bad = [w for w in words if w not in REVIEW_KINDS]
    if bad:
        raise ValueError(f"unknown {', '.join(bad)}: give {', '.join(REVIEW_KINDS)} (comma-separated), all or none")
    return tuple(k for k in REVIEW_KINDS if k in words)


def _health_timeout(value: Any) -> float:
    seconds = parse_duration(value) if isinstance(value, str) else float(_whole(value, 1))
    if not 0 < seconds <= MAX_HEALTH_TIMEOUT:
        raise ValueError(f"{value!r} is out of range: give 1s to 1h")
    return seconds


def policy_problems(annotations: Mapping[str, Any]) -> Dict[str, str]:
    """annotation -> what is wrong with its value (empty: the policy is valid)."""
    out = {}
    for key, check in ((FAILURE_BUDGET, lambda v: _whole(v, 1)), (CANARY_NODES, lambda v: _whole(v, 0)),
                       (CANARY_WAIT, lambda v: parse_duration(str(v)) if isinstance(v, str) else _whole(v, 0)),
                       (REQUIRE_ACK, parse_review_kinds), (HEALTH_TIMEOUT, _health_timeout)):
        if key in annotations:
            try:
                check(annotations[key])
            except ValueError as exc:
                out[key] = str(exc)
    return out


def pool_annotations(pool: Mapping[str, Any]) -> Mapping[str, Any]:
    """A pool's annotations, {} where its metadata or annotations are not objects (the gates read
    their annotation from a pool as the store holds it, valid or not)."""
    meta = pool.get("metadata") if isinstance(pool.get("metadata"), Mapping) else {}
    return meta.get("annotations") if isinstance(meta.get("annotations"), Mapping) else {}


def rollout_policy(pool: Mapping[str, Any]) -> RolloutPolicy:
    """The pool's policy; a value that does not parse is the default (the pool's checks name it)."""
    ann = (pool.get("metadata") or {}).get("annotations") or {}
    bad = policy_problems(ann)

    def get(key: str, parse: Any, default: Any) -> Any:
        return default if key not in ann or key in bad else parse(ann[key])

    return RolloutPolicy(get(FAILURE_BUDGET, lambda v: _whole(v, 1), None), get(CANARY_NODES, lambda v: _whole(v, 0), 0),
                         get(CANARY_WAIT, lambda v: parse_duration(str(v)), 0.0),
                         get(REQUIRE_ACK, parse_review_kinds, ()), str(ann.get(ACKNOWLEDGED) or ""),
                         get(HEALTH_TIMEOUT, _health_timeout, None))


def health_header(pool: Optional[Mapping[str, Any]]) -> list:
    """The served config's ``X-Health-Timeout`` header (seconds) when the pool sets its health time limit."""
    limit = rollout_policy(pool).health_timeout if pool is not None else None
    return [("X-Health-Timeout", f"{limit:g}")] if limit else []


def node_priority(labels: Mapping[str, str]) -> Tuple[int, str]:
    """(priority, why it was ignored or ""): the node's rollout priority label."""
    value = labels.get(PRIORITY_LABEL)
    if value is None:
        return 0, ""
    text = str(value).strip()
    sign = -1 if text.startswith("-") else 1
    digits = text[1:] if text[:1] in "+-" else text
    if not digits.isdigit() or int(digits) > MAX_PRIORITY:
        return 0, f"label {PRIORITY_LABEL}={value!r} ignored: not a whole number from -{MAX_PRIORITY} to {MAX_PRIORITY}"
    return sign * int(digits), ""
