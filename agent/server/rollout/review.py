"""Ours (issue 49): what a new rendering of a pool carries that the admin should see before its
nodes carry it out, and the hold that waits for the admin's word (pure).

- **Validator warnings** of the pool's inputs (the pool and the MachineConfigs it renders from):
  an unused key such as ``storge:`` for ``storage:``, whatever else ``node-agent validate`` warns
  of. The object is admitted (the MCO admits it too) and the server says so: ``status.renderWarnings`` and the condition ``RenderWarnings`` (ours) of the
  pool, ``/healthz``, the log and, with ``--backend kubernetes``, an Event on the pool.
- **What the nodes will do** to take it, from the config they are targeted to (the node
  disruption plan of agent/core/disruption.py, as node-agent plans it): the paths it removes, a
  reboot, a drain (``status.pendingDisruption``, ``status.review``, ``describe pool``).
- **The hold**: the pool annotation ``node-config-server.openshift.io/require-ack`` (``warnings``,
  ``file-removal``, ``reboot``; agent/core/rolloutpolicy.py) keeps such a rendering from becoming
  the pool's target until the admin acknowledges it (``node-config-server ack pool NAME``, or the
  annotation ``node-config-server.openshift.io/acknowledged: <rendered config>``). Until then the
  pool keeps its target, nobody is targeted to the rendering, and ``RenderHeld`` (reason
  ``AwaitingAcknowledgement``) says why, as after the admin's rollback (progress.rollout_step).
  The MCO has no such hold: its render controller moves ``spec.configuration`` at once.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from agent.server.rollout.progress import Step

CONDITION = "RenderWarnings"  # ours
HELD_REASON = "AwaitingAcknowledgement"
LISTED = 20  # paths and warnings named in a message (the count is whole)


@dataclass(frozen=True)
class Review:
    config: str  # the rendering
    base: str  # what it is compared with: the config the pool's nodes are targeted to before it
    warnings: Tuple[str, ...] = ()
    removes: Tuple[str, ...] = ()  # files, directories, links and units it removes
    reboot: bool = False
    drain: bool = False
    actions: Tuple[str, ...] = ()
    planned: bool = True  # False: the plan could not be made (a config unknown here)

    def findings(self, kinds: Sequence[str]) -> List[str]:
        """What of ``kinds`` (rolloutpolicy.REVIEW_KINDS) this rendering does, in words."""
        out = []
        if "warnings" in kinds and self.warnings:
            out.append(f"has {len(self.warnings)} validator warning(s) ({_listed(self.warnings, 3)})")
        if "file-removal" in kinds and self.removes:
            out.append(f"removes {_listed(self.removes, LISTED)}")
        if "reboot" in kinds and self.reboot:
            out.append("needs a reboot" + (" and a drain" if self.drain else ""))
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"config": self.config, "from": self.base, "warnings": list(self.warnings[:LISTED]),
                "removes": list(self.removes[:LISTED]), "reboot": self.reboot, "drain": self.drain,
                "actions": list(self.actions), **({} if self.planned else {"planned": False})}


def _listed(items: Sequence[str], limit: int) -> str:
    return "; ".join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")


def warning_text(kind_name: str, problem: Any) -> str:
    """``MachineConfig 50-infra: $.spec.config.storge: unused key storge``."""
    kind, _, name = kind_name.partition("/")
    return f"{kind} {name}: {getattr(problem, 'path', '$')}: {getattr(problem, 'message', problem)}"


def warnings_of(state_warnings: Mapping[str, Sequence[Any]], pool: str, sources: Sequence[str]) -> List[str]:
    """The warnings of the pool object and of the MachineConfigs ``sources`` (a rendering's inputs)."""
    keys = [f"MachineConfigPool/{pool}"] + [f"MachineConfig/{s}" for s in sources]
    return [warning_text(k, p) for k in keys for p in state_warnings.get(k, ())]


def removed_paths(changes: Mapping[str, Any]) -> List[str]:
    """The paths and units a plan's changes (agent.core.diff.Changes.to_dict) remove."""
    out = [str(f.get("path")) + ("" if f.get("kind") in (None, "file") else f" ({f['kind']})")
           for f in changes.get("files") or [] if f.get("change") == "removed"]
    out += [f"unit {u.get('name')}" for u in changes.get("units") or [] if u.get("change") == "removed"]
    return out


def review_of(config: str, base: str, warnings: Sequence[str], plan: Optional[Mapping[str, Any]]) -> Review:
    """The review of ``config`` against ``base``; ``plan``: agent.core.disruption.Plan.to_dict()
    from one to the other (None: it could not be made)."""
    if plan is None:
        return Review(config, base, tuple(warnings), planned=False)
    actions = tuple(str(a.get("type", "")) + (f" {a['unit']}" if a.get("unit") else "") for a in plan.get("actions") or [])
    return Review(config, base, tuple(warnings), tuple(removed_paths(plan.get("changes") or {})),
                  bool(plan.get("reboot")), bool(plan.get("drain")), actions)


def held_text(review: Review, found: List[str], pool: str) -> str:
    return (f"{review.config} {'; '.join(found)}: it waits for the admin's acknowledgement (node-config-server "
            f"ack pool {pool}, or the pool annotation node-config-server.openshift.io/acknowledged={review.config}); "
            f"until then the pool's target stays {review.base}")


def reviewed_step(step: Step, row_target: str, rendered: str, required: Sequence[str], acknowledged: Sequence[str],
                  review: Callable[[], Review], pool: str) -> Tuple[Step, Optional[Review]]:
    """``step`` (progress.rollout_step), or, when it would make a new rendering the target that
    does what the pool requires an acknowledgement for and the admin has not acknowledged, the
    same step keeping ``row_target`` as the target and saying why (``held``); the review that
    held it. ``review`` is asked only then (it plans a disruption)."""
    if not required or step.held or step.target != rendered or rendered == row_target or rendered in acknowledged:
        return step, None
    found = review()
    words = found.findings(required)
    if not words and found.planned:
        return step, None
    if not found.planned:
        words = [f"could not be compared with {row_target} (a config unknown here), so what it does is not known"]
    return Step(row_target, step.current, held_text(found, words, pool)), found


def warnings_condition(warnings: Sequence[str], config: str) -> Dict[str, str]:
    """The pool's ``RenderWarnings`` condition (ours): True while its newest rendering's inputs have
    validator warnings, each named (at most LISTED) in the message."""
    if not warnings:
        return {"type": CONDITION, "status": "False", "reason": "", "message": ""}
    return {"type": CONDITION, "status": "True", "reason": "ValidatorWarnings",
            "message": f"{len(warnings)} validator warning(s) in the inputs of {config}: {_listed(warnings, LISTED)}"}
