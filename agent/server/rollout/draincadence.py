"""When a drain is attempted, when it has failed, and what says so (pure: no I/O, times passed in).

Upstream: machine-config-operator pkg/controller/drain/drain_controller.go. ``DefaultConfig()``
gives a 90 s timeout per attempt (``DrainHelperTimeout``), a retry after a minute
(``DrainRequeueDelay``), every 5 minutes once the drain has gone on for 10 minutes
(``DrainRequeueFailingDelay`` after ``DrainRequeueFailingThreshold``; ``drainNode`` then also
emits a ``DrainThresholdExceeded`` Warning), and after an hour (``DrainTimeoutDuration``) each
new attempt emits a ``DrainFailed`` Warning on the Node ("drain exceeded timeout ... Will continue
to retry") and sets ``mcc_drain_err{node}`` to 1, which the MCO's alert MCCDrainError fires on;
a drain that succeeds deletes that series. The MCO measures every duration from the cordon
(``ongoingDrains[node]``), not from the first failure; so does this module.

Our drain is driven by the node asking for its lease every few seconds: during an attempt each
ask runs one round (kube_drain.Drainer.drain_once); between attempts the node is told to wait.
The state lives on the Node as annotations (``annotations``/``from_annotations``), so that every
server replica answering the node sees the same attempt, its start and its last error.
"""

import datetime
import math
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

PREFIX = "node-config-server.openshift.io/"  # the prefix of DRAINED_FOR (kube_drain.py), our other mark
STARTED = PREFIX + "drain-started"  # the cordon: every duration is measured from it
ATTEMPTS = PREFIX + "drain-attempts"
ATTEMPT_STARTED = PREFIX + "drain-attempt-started"  # empty between attempts
NEXT_ATTEMPT = PREFIX + "drain-next-attempt"
LAST_ERROR = PREFIX + "drain-last-error"  # what blocked the last attempt: the PDB, the pod, the error
FAILED = PREFIX + "drain-failed"  # set once past --drain-fail-after: the time of the last DrainFailed
KEYS = (STARTED, ATTEMPTS, ATTEMPT_STARTED, NEXT_ATTEMPT, LAST_ERROR, FAILED)
MAX_ERROR = 1024  # an annotation is no log: the head of the error is enough to name the blocker


@dataclass(frozen=True)
class Cadence:
    """Seconds; the defaults are the MCO's DefaultConfig() (drain_controller.go)."""
    attempt_timeout: float = 90.0  # DrainHelperTimeout
    retry: float = 60.0  # DrainRequeueDelay
    slow_retry: float = 300.0  # DrainRequeueFailingDelay
    slow_after: float = 600.0  # DrainRequeueFailingThreshold
    fail_after: float = 3600.0  # DrainTimeoutDuration
    # Ours: a drain a PodDisruptionBudget holds this long gives its node's slot to the next one (0: never,
    # as upstream, where one pinned node holds the pool's rollout for as long as the budget holds).
    defer_after: float = 600.0

    def check(self) -> Optional[str]:
        for flag, value in (("--drain-attempt-timeout", self.attempt_timeout), ("--drain-retry", self.retry),
                            ("--drain-slow-retry", self.slow_retry), ("--drain-slow-after", self.slow_after),
                            ("--drain-fail-after", self.fail_after)):
            if not value > 0:
                return f"{flag} {value:g}: must be more than 0 seconds"
        if not self.defer_after >= 0:
            return f"--drain-defer-after {self.defer_after:g}: must be 0 (never) or more seconds"
        return None


def defer_due(state: "DrainState", cadence: Cadence, now: float, held_by_budget: bool) -> str:
    """Ours: why the drain under way is given up for now ("" while it is not): a PodDisruptionBudget
    (``held_by_budget``: the last round's evictions were refused with 429, or the last error names
    one) has held it for ``cadence.defer_after`` seconds since the cordon. No PDB is violated: the
    node is uncordoned with its config, and its pods stay where the budget wants them."""
    if not cadence.defer_after or not state.active or state.started is None or not held_by_budget:
        return ""
    if now - state.started < cadence.defer_after:
        return ""
    return (f"its drain has been held by a PodDisruptionBudget for {duration(now - state.started)} "
            f"(--drain-defer-after {duration(cadence.defer_after)}): {state.last_error or 'evictions refused (429)'}")


@dataclass(frozen=True)
class DrainState:
    started: Optional[float] = None
    attempts: int = 0
    attempt_started: Optional[float] = None
    next_attempt: Optional[float] = None
    last_error: str = ""
    failed: Optional[float] = None

    @property
    def active(self) -> bool:
        return self.started is not None

    def to_dict(self) -> Dict[str, Any]:
        """The view's form (``describe node``, ``status.drain.nodes``), ISO 8601 times."""
        return {"since": iso(self.started), "attempts": self.attempts, "attemptStarted": iso(self.attempt_started),
                "nextAttempt": iso(self.next_attempt), "blockedBy": self.last_error,
                "failing": self.failed is not None, "failedAt": iso(self.failed)}


def iso(t: Optional[float]) -> str:
    if t is None:
        return ""
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: Any) -> Optional[float]:
    if not text:
        return None
    try:
        return datetime.datetime.strptime(str(text), "%Y-%m-%dT%H:%M:%SZ").replace(
            tzinfo=datetime.timezone.utc).timestamp()
    except ValueError:
        return None


def from_annotations(annotations: Dict[str, Any]) -> DrainState:
    """The state a replica wrote (times to the second, as the API's own); unreadable = absent."""
    try:
        attempts = int(annotations.get(ATTEMPTS) or 0)
    except ValueError:
        attempts = 0
    return DrainState(_epoch(annotations.get(STARTED)), attempts, _epoch(annotations.get(ATTEMPT_STARTED)),
                      _epoch(annotations.get(NEXT_ATTEMPT)), str(annotations.get(LAST_ERROR) or ""),
                      _epoch(annotations.get(FAILED)))


def annotations(state: DrainState) -> Dict[str, Optional[str]]:
    """A merge patch's annotations for ``state`` (None deletes: a finished drain leaves none)."""
    if not state.active:
        return {k: None for k in KEYS}
    return {STARTED: iso(state.started), ATTEMPTS: str(state.attempts),
            ATTEMPT_STARTED: iso(state.attempt_started) or None, NEXT_ATTEMPT: iso(state.next_attempt) or None,
            LAST_ERROR: state.last_error[:MAX_ERROR] or None, FAILED: iso(state.failed) or None}


@dataclass(frozen=True)
class Step:
    """What one ask of the node leads to: run a round now, or wait ``wait`` seconds; the state to
    write first (None: unchanged) and the Events to emit, (reason, message)."""
    run: bool
    state: DrainState
    changed: bool
    wait: float = 0.0
    events: Tuple[Tuple[str, str], ...] = ()


def _whole(t: float) -> float:
    return float(math.floor(t))  # annotations keep whole seconds: compare what was written


def begin(state: DrainState, cadence: Cadence, node: str, now: float) -> Step:
    """Before a round: go on with the attempt under way, start the first or the next one when
    due (the MCO's syncNode -> drainNode: DrainFailed at the start of an attempt once the drain
    has gone on for ``fail_after``), or wait."""
    now = _whole(now)
    if not state.active:
        return Step(True, DrainState(started=now, attempts=1, attempt_started=now), True)
    if state.attempt_started is not None and now < state.attempt_started + cadence.attempt_timeout:
        return Step(True, state, False)
    events: List[Tuple[str, str]] = []
    changed = False
    if state.attempt_started is not None:  # the attempt ran out of time without a finished round
        state, slow = failed_attempt(state, cadence, state.attempt_started + cadence.attempt_timeout)
        changed = True
        if slow:  # drainNode's DrainThresholdExceeded, on each failure past the threshold, in its words
            events.append(("DrainThresholdExceeded", f"Drain failed. Drain has been failing for more than "
                                                     f"{go_minutes(cadence.slow_after)} minutes. Waiting "
                                                     f"{go_minutes(cadence.slow_retry)} minutes then retrying. "
                                                     f"Error message from drain: {state.last_error}"))
    if state.next_attempt is not None and now < state.next_attempt:
        return Step(False, state, changed, wait=state.next_attempt - now, events=tuple(events))
    new = replace(state, attempts=state.attempts + 1, attempt_started=now, next_attempt=None)
    if now - (state.started or now) > cadence.fail_after:
        # drainNode's words exactly; what blocks is in DrainThresholdExceeded, the MCN and the Node
        events.append(("DrainFailed", f"node {node}: drain exceeded timeout: {duration(cadence.fail_after)}. "
                                      f"Will continue to retry."))
        new = replace(new, failed=now)
    return Step(True, new, True, events=tuple(events))


def failed_attempt(state: DrainState, cadence: Cadence, end: float) -> Tuple[DrainState, bool]:
    """An attempt that ran out of time at ``end``: (state, slow). The next one ``retry`` later, or
    ``slow_retry`` once the drain had gone on for ``slow_after`` when the attempt began (upstream
    measures ``duration`` before RunNodeDrain)."""
    began = state.attempt_started if state.attempt_started is not None else end
    slow = began - (state.started or began) > cadence.slow_after
    error = state.last_error or f"the drain did not finish within {duration(cadence.attempt_timeout)}"
    return replace(state, attempt_started=None, last_error=error,
                   next_attempt=_whole(end + (cadence.slow_retry if slow else cadence.retry))), slow


def after_round(state: DrainState, done: bool, error: str) -> Tuple[DrainState, bool]:
    """After a round of the attempt under way: (state, changed). Done ends the drain (no state
    left: the MCO deletes ongoingDrains[node] and the mcc_drain_err series); otherwise the
    blocker is remembered so that the node's view names it."""
    if done:
        return DrainState(), True
    error = error[:MAX_ERROR]
    if error == state.last_error:
        return state, False
    return replace(state, last_error=error), True


def duration(seconds: float) -> str:
    """Go's time.Duration String() for whole seconds ("1h0m0s", "10m0s", "1m30s", "45s"), as the
    MCO's messages print them."""
    s = int(seconds)
    h, rest = divmod(s, 3600)
    m, sec = divmod(rest, 60)
    if h:
        return f"{h}h{m}m{sec}s"
    if m:
        return f"{m}m{sec}s"
    return f"{sec}s"


def go_minutes(seconds: float) -> str:
    """Go's ``%v`` of ``time.Duration.Minutes()`` (a float64: shortest form, "10", "5", "0.05"), as
    drain_controller.go ``drainNode`` prints DrainRequeueFailingThreshold and -Delay."""
    minutes = seconds / 60.0
    return str(int(minutes)) if minutes == int(minutes) and abs(minutes) < 1e21 else repr(minutes)


def drain_required(topology: Optional[str]) -> Tuple[bool, str]:
    """Whether a node's drain cordons and evicts at all: the MCD's drainRequired
    (pkg/daemon/drain.go) is ``!isSingleNodeTopology(controlPlaneTopology)``, since on a
    single-node cluster the pods have nowhere else to run and a PDB would hold the drain forever.
    ``topology``: the Infrastructure object's status.controlPlaneTopology; None when the API has
    no such object (plain Kubernetes), which drains: a count of Nodes is no topology (the first
    Node of any cluster is alone for a while)."""
    if topology == "SingleReplica":
        return False, ("single-node cluster (Infrastructure cluster: status.controlPlaneTopology SingleReplica): no "
                       "cordon and no drain, as the MCD's drainRequired; the pods have nowhere else to run")
    return True, ""


def drain_condition(state: DrainState, at: str) -> Optional[Dict[str, str]]:
    """The MachineConfigNode's ``Drained`` condition while a drain is under way (None otherwise),
    as drain_controller.go's GenerateAndApplyMachineConfigNodes writes it: status Unknown, reason
    ``UpdateExecutedDrained``, the error once an attempt has failed."""
    if not state.active:
        return None
    if state.last_error:
        message = (f"Error: Node Drain has not succeeded. Error is: {state.last_error} (draining since "
                   f"{iso(state.started)}, {state.attempts} attempt(s))")
    else:
        message = f"Draining node (since {iso(state.started)}, attempt {state.attempts})"
    return {"type": "Drained", "status": "Unknown", "reason": "UpdateExecutedDrained", "message": message,
            "lastTransitionTime": iso(state.started) or at}
