"""Carry out a plan's disruption actions through the host layer (systemd and logind over D-Bus).

Drain is not done here: the config server coordinates drains (the update loop asks it for a
lease before applying), so a Drain entry is only reported. A Reboot comes last and alone (the
plan guarantees it); ``os.sync()`` runs right before it, after the caller has made its own
state durable. On a root that is not the running system (``live=False``) nothing is called and
each live action is reported as not performed.
"""

import logging
import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from agent.core.disruption import (
    DAEMON_RELOAD,
    DRAIN,
    NONE,
    REBOOT,
    RELOAD,
    RESTART,
    SPECIAL,
    Action,
)
from agent.errors import HostError

log = logging.getLogger(__name__)

DONE = "done"
SKIPPED = "skipped"
NOT_PERFORMED = "not-performed"
FAILED = "failed"

# At first boot a reload/restart only matters for a unit that is already running.
_RUNNING = ("active", "reloading", "activating")


@dataclass(frozen=True)
class Outcome:
    action: Action
    status: str  # done | skipped | not-performed | failed
    detail: str = ""

    def to_dict(self) -> Dict[str, Any]:
        out = self.action.to_dict()
        out.pop("causes", None)
        return {"action": out, "status": self.status, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.action.describe()}: {self.status}" + (f" ({self.detail})" if self.detail else "")


@dataclass
class ActionsResult:
    outcomes: List[Outcome] = field(default_factory=list)
    rebooting: bool = False

    @property
    def not_performed(self) -> List[str]:
        """One line per action left undone because the root is not the running system."""
        return [str(o) for o in self.outcomes if o.status == NOT_PERFORMED]

    @property
    def ok(self) -> bool:
        return all(o.status != FAILED for o in self.outcomes)

    def to_dict(self) -> Dict[str, Any]:
        return {"ok": self.ok, "rebooting": self.rebooting, "outcomes": [o.to_dict() for o in self.outcomes]}


class ActionFailed(HostError):
    """A reload/restart/daemon-reload/reboot failed; ``result`` holds what was done before."""

    def __init__(self, message: str, result: ActionsResult):
        self.result = result
        super().__init__(message)


def carry_out(actions: Sequence[Action], systemd: Any, logind: Any, *, firstboot: bool = False,
              live: bool = True, timeout: float = 300.0) -> ActionsResult:
    """Do ``actions`` in order; stop at the first failure (ActionFailed, with what was done)."""
    result = ActionsResult()
    done_units: Dict[Tuple[str, str], str] = {}
    for action in actions:
        try:
            outcome = _one(action, systemd, logind, firstboot, live, timeout, done_units)
        except HostError as exc:
            result.outcomes.append(Outcome(action, FAILED, str(exc)))
            log.error("%s failed: %s", action.describe(), exc)
            raise ActionFailed(f"{action.describe()} failed: {exc}", result) from None
        result.outcomes.append(outcome)
        if action.type == REBOOT and outcome.status == DONE:
            result.rebooting = True
    return result


def _one(action: Action, systemd: Any, logind: Any, firstboot: bool, live: bool, timeout: float,
         done_units: Dict[Tuple[str, str], str]) -> Outcome:
    kind = action.type
    if kind == NONE:
        return Outcome(action, DONE, "nothing to do")
    if kind == DRAIN:
        return Outcome(action, SKIPPED, "drains are coordinated with the config server before applying")
    if kind not in (DAEMON_RELOAD, RELOAD, RESTART, SPECIAL, REBOOT):
        raise HostError(f"unknown action type {kind!r}")
    if not live:
        return Outcome(action, NOT_PERFORMED, "the root is not the running system")

    if kind == DAEMON_RELOAD:
        systemd.daemon_reload()
        return Outcome(action, DONE)
    if kind == REBOOT:
        os.sync()  # everything written so far reaches the disk before logind starts the shutdown
        logind.reboot()
        return Outcome(action, DONE)

    verb = RESTART if kind == RESTART else RELOAD  # Special reloads crio.service
    unit = action.target_unit
    # A restart also covers a later reload of the same unit; a repeat is pointless.
    if (verb, unit) in done_units or (verb == RELOAD and (RESTART, unit) in done_units):
        return Outcome(action, SKIPPED, f"{unit} was already {'restarted' if (RESTART, unit) in done_units else 'reloaded'}")
    if firstboot or action.conditional:
        state = systemd.active_state(unit)
        if state not in _RUNNING:
            return Outcome(action, SKIPPED, f"{unit} is {state}: it will start with the new config")
    if verb == RESTART:
        job = systemd.restart_unit(unit, timeout=timeout)
    else:
        job = systemd.reload_unit(unit, timeout=timeout)
    done_units[(verb, unit)] = job
    return Outcome(action, DONE, f"job {job}")
