"""First boots in the service (a mixin of ``service.Cluster``): each report's first-boot record
(agent/server/rollout/firstboots.py ``record``), the deadline of each pool, and what the API, the
views and /metrics show of a node's first boot and of a pool's, decided at the moment they are
read (``firstboots.decide``). Nothing here keeps time in a process: a stall is a function of the
stored record and now, so every replica shows the same."""

import time
from typing import Any, Callable, Dict, List, Optional

from agent.server.rollout import firstboots
from agent.server.rollout.progress import iso8601
from agent.server.store.nodestore import SERVER_KEY, NodeRecord

# What a node view carries of the record (the stages only in one node's view: a list of nodes
# stays small), besides the decision.
VIEW_FIELDS = ("began", "reportedAt", "endedAt", "run", "runs", "result", "startedAt", "exitCode", "hint",
               "error", "rebootPending", "rebooted")


class FirstBoots:
    """Needs ``self.store`` and ``self.state()`` (service.Cluster)."""

    firstboot_deadline: float = firstboots.DEFAULT_DEADLINE  # serve --firstboot-deadline

    @property
    def first_boot_listeners(self) -> List[Callable[[str, Dict[str, Any]], None]]:
        """Called with (pool, record) when a report ends a first boot (Done or Failed): /metrics'
        counter and histogram (agent/server/http/metrics.py)."""
        listeners = self.__dict__.get("_first_boot_listeners")
        if listeners is None:
            listeners = self.__dict__["_first_boot_listeners"] = []
        return listeners

    def with_first_boot(self, previous: Optional[Dict[str, Any]], body: Dict[str, Any], registered: Optional[float],
                        now: float) -> Dict[str, Any]:
        """``body`` with the server's first-boot record in place of the node's object (none when no
        first boot is known); ``previous``: the node's last stored report."""
        rec = firstboots.record((previous or {}).get(firstboots.KEY), body, now, registered)
        out = {k: v for k, v in body.items() if k != firstboots.KEY}
        if rec is not None:
            out[firstboots.KEY] = rec
        return out

    def first_boot_ended(self, pool: str, previous: Optional[Dict[str, Any]], body: Dict[str, Any]) -> None:
        """Tell the listeners when this report (``body``, as stored) ended the node's first boot."""
        rec = body.get(firstboots.KEY)
        if not isinstance(rec, dict) or not rec.get("endedAt"):
            return
        old = (previous or {}).get(firstboots.KEY) or {}
        if (old.get("endedAt"), old.get("outcome")) == (rec.get("endedAt"), rec.get("outcome")):
            return  # ended before this report (a day-2 report carrying it)
        for listener in self.first_boot_listeners:
            listener(pool, rec)

    def first_boot_deadlines(self, st: Any = None) -> Dict[str, float]:
        """pool -> its first-boot deadline (annotation, else serve's), for the pools of the state
        (``st``: the one the caller holds; else the state now)."""
        st = self.state() if st is None else st  # type: ignore[attr-defined]
        return {name: firstboots.deadline_of(pool, self.firstboot_deadline) for name, pool in st.pools.items()}

    def first_boot_decision(self, report: Dict[str, Any], pool: str, now: Optional[float] = None,
                            deadlines: Optional[Dict[str, float]] = None) -> Optional[firstboots.Decision]:
        deadlines = self.first_boot_deadlines() if deadlines is None else deadlines
        return firstboots.decide(report.get(firstboots.KEY), time.time() if now is None else now,
                                 deadlines.get(pool, self.firstboot_deadline))

    def first_boot_view(self, rec: NodeRecord, now: Optional[float] = None, deadlines: Optional[Dict[str, float]] = None,
                        stages: bool = False) -> Optional[Dict[str, Any]]:
        """A node's first boot as the API shows it (``firstBoot`` of a node): the decision now
        (outcome, reason, message, stage, since, the deadline) and the record's times, exit code,
        error and what to do; ``stages``: the stages the node reported, with their times."""
        record = rec.report.get(firstboots.KEY)
        decision = self.first_boot_decision(rec.report, rec.pool, now, deadlines)
        if decision is None or not isinstance(record, dict):
            return None
        out = {"outcome": decision.outcome, "reason": decision.reason, "message": decision.message,
               "stage": decision.stage, "since": iso8601(decision.since), "deadlineSeconds": decision.deadline,
               **{k: record[k] for k in VIEW_FIELDS if record.get(k) is not None}}
        duration = firstboots.duration(record)
        if duration is not None:
            out["seconds"] = round(duration, 3)
        if stages:
            out["stages"] = list(record.get("stages") or [])
        return out

    def first_boot_summary(self, pool: str, now: Optional[float] = None,
                           deadlines: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
        """``status.firstBoots`` of a pool view: its first boots not done, decided now (O(them):
        the store indexes them), whatever the node's approval: a name still pending (not proven,
        not approved) is listed and counted too, marked ``pending``."""
        now = time.time() if now is None else now
        deadlines = self.first_boot_deadlines() if deadlines is None else deadlines
        decided, unproven = [], set()
        for rec in self.store.open_first_boots(pool=pool):  # type: ignore[attr-defined]
            decision = self.first_boot_decision(rec.report, pool, now, deadlines)
            if decision is not None:
                decided.append((rec.node, decision, rec.report.get(firstboots.KEY) or {}))
                if (rec.report.get(SERVER_KEY) or {}).get("pending"):
                    unproven.add(rec.node)
        out = firstboots.summary(decided)
        for node, entry in (out.get("nodes") or {}).items():
            if node in unproven:
                entry["pending"] = True
        return out
