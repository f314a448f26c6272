"""A node's first boot as the server follows it, and when it has stalled (pure; ours: the MCO
keeps no such record, and its open MCO-2224 reports only a failed OS pivot, as an Event).

The node tells its first boot from the first stage that reached the server on: a ``firstBoot``
object in each first-boot report (agent/node/firstbootreport.py: its run, the stage it reports
from, how the run ended, the exit code and the "what to do" line of a failure, the stages with
their times). ``record`` folds each report into one record per node, kept with the node's report
in the node store (so every replica reads the same one) and carried across its day-2 reports:

- ``began``: when the first boot began, on the server's clock: the first report's arrival less
  the time the run had been going (``elapsed``, the node's monotonic clock: no clock skew), or the
  node's registration when that was earlier;
- ``outcome``: Running, Done (a Done report: from the first boot itself, or from the day-2 loop
  after the first boot's reboot), or Failed (the node said so, with stage, exit code, reason and
  what to do; or its day-2 loop reported Degraded after the first boot's reboot);
- ``reportedAt``: the last report of the first boot; ``endedAt`` once Done or Failed.

``decide`` adds what a node cannot report itself: a first boot neither Done nor Failed whose
last report is older than the deadline (``serve --firstboot-deadline``, a pool's annotation
``node-agent.io/firstboot-deadline``) is Stalled, naming the stage it last reported and when (a
first boot killed after its config fetch; a node that reported "reboot pending" and never came
back). It is a function of the record and ``now`` only: every replica decides the same, and a
later report clears it. Times in records are RFC 3339 (UTC, with milliseconds), as everything
the API sends.
"""

import re
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Tuple

from agent.core.objectchecks import FIRSTBOOT_DEADLINE_ANNOTATION, parse_deadline
from agent.server.rollout.progress import epoch_of, iso8601

KEY = "firstBoot"  # in a report: the node's object; in a stored report: the server's record
RUNNING, DONE, FAILED, STALLED = "Running", "Done", "Failed", "Stalled"
OUTCOMES = (RUNNING, DONE, FAILED, STALLED)
REASONS = {RUNNING: "FirstBootRunning", DONE: "FirstBootDone", FAILED: "FirstBootFailed",
           STALLED: "FirstBootStalled"}
# RHCOS first boots: the longest silence between two reports is the OS pivot (pulling and staging
# the ~1 GiB OS image) or its reboot (a server's firmware may take 10 minutes and more); 30 minutes
# covers both on a slow network, where the Machine API's nodeStartupTimeout allows 10 minutes for
# a whole first boot on clouds (docs/operations.md, "First boots from the cluster").
DEFAULT_DEADLINE = 1800.0
VIEW_NODES = 100  # failed and stalled first boots listed in a pool view

RUN_ID = re.compile(r"^[0-9a-f]{32}$")
STAGE = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
RUN_RESULTS = ("running", "done", "failed")
STAGE_RESULTS = ("running", "ok", "failed", "skipped")
MAX_STAGES = 32
MAX_TEXT = 4096
MAX_ELAPSED = 7 * 86400.0
SENT = ("run", "startedAt", "stage", "result", "exitCode", "hint", "elapsed", "rebootPending", "stages")


class Invalid(ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def check_sent(value: Any) -> Dict[str, Any]:
    """The node's ``firstBoot`` object, checked and bounded (raises Invalid naming the field)."""
    where = "$.firstBoot"
    if not isinstance(value, dict):
        raise Invalid(where, "must be an object")
    for key in value:
        if key not in SENT:
            raise Invalid(f"{where}.{key}", f"unknown field; known: {', '.join(SENT)}")
    if not isinstance(value.get("run"), str) or not RUN_ID.match(value["run"]):
        raise Invalid(f"{where}.run", "required: the run's id, 32 hexadecimal digits")
    if not isinstance(value.get("stage"), str) or not STAGE.match(value["stage"]):
        raise Invalid(f"{where}.stage", "required: a stage name (lower-case letters, digits and '-', at most 32)")
    if value.get("result") not in RUN_RESULTS:
        raise Invalid(f"{where}.result", f"required: one of {', '.join(RUN_RESULTS)}")
    _time(value.get("startedAt"), f"{where}.startedAt", required=True)
    code = value.get("exitCode")
    if code is not None and (isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255):
        raise Invalid(f"{where}.exitCode", "must be a whole number from 0 to 255")
    hint = value.get("hint")
    if hint is not None and (not isinstance(hint, str) or len(hint) > MAX_TEXT):
        raise Invalid(f"{where}.hint", f"must be a string of at most {MAX_TEXT} characters")
    elapsed = value.get("elapsed")
    if elapsed is not None and (isinstance(elapsed, bool) or not isinstance(elapsed, (int, float))
                                or not 0 <= elapsed <= MAX_ELAPSED):
        raise Invalid(f"{where}.elapsed", f"must be seconds from 0 to {MAX_ELAPSED:.0f}")
    if "rebootPending" in value and not isinstance(value["rebootPending"], bool):
        raise Invalid(f"{where}.rebootPending", "must be true or false")
    return dict(value, stages=_check_stages(value.get("stages"), f"{where}.stages"))


def _time(value: Any, where: str, required: bool = False) -> None:
    if value is None and not required:
        return
    if not isinstance(value, str) or len(value) > 40 or epoch_of(value) is None:
        raise Invalid(where, ("required: " if required else "") + "an RFC 3339 time (2026-11-28T09:14:03.120Z)")


def _check_stages(stages: Any, where: str) -> List[Dict[str, Any]]:
    if stages is None:
        return []
    if not isinstance(stages, list) or len(stages) > MAX_STAGES:
        raise Invalid(where, f"must be a list of at most {MAX_STAGES} stages")
    out = []
    for i, st in enumerate(stages):
        at = f"{where}.{i}"
        if not isinstance(st, dict) or set(st) - {"name", "startedAt", "seconds", "result"}:
            raise Invalid(at, "must be {name, startedAt, seconds, result}")
        if not isinstance(st.get("name"), str) or not STAGE.match(st["name"]):
            raise Invalid(f"{at}.name", "a stage name (lower-case letters, digits and '-', at most 32)")
        if st.get("result") not in STAGE_RESULTS:
            raise Invalid(f"{at}.result", f"one of {', '.join(STAGE_RESULTS)}")
        _time(st.get("startedAt"), f"{at}.startedAt")
        seconds = st.get("seconds")
        if seconds is not None and (isinstance(seconds, bool) or not isinstance(seconds, (int, float))
                                    or not 0 <= seconds <= MAX_ELAPSED):
            raise Invalid(f"{at}.seconds", f"seconds from 0 to {MAX_ELAPSED:.0f}, or null while it runs")
        out.append({k: st[k] for k in ("name", "startedAt", "seconds", "result") if st.get(k) is not None})
    return out


# -- the record --------------------------------------------------------------------------------

def record(previous: Any, body: Dict[str, Any], now: float, registered: Optional[float] = None) -> Optional[Dict]:
    """The first-boot record once ``body`` (a checked report) is recorded at ``now``; ``previous``:
    the record the node's last report left (None: none). None when no first boot is known (a
    node that first booted before first boots were reported, or a report that is not a first
    boot's and follows none)."""
    prev = previous if isinstance(previous, dict) and previous.get("outcome") in OUTCOMES else None
    sent = body.get(KEY)
    if not isinstance(sent, dict):
        return _after_first_boot(prev, body, now)
    fresh = prev is None or prev["outcome"] == DONE  # a new first boot: the first, or a reinstalled node's
    out: Dict[str, Any] = {} if fresh else dict(prev)
    if fresh:
        began = now - float(sent.get("elapsed") or 0.0)
        if prev is None and registered is not None and 0 < registered < began:
            began = registered  # registered by a run that reported nothing (killed in between)
        out.update(began=stamp(began), runs=1)
    elif sent["run"] != prev.get("run"):
        out["runs"] = int(prev.get("runs") or 1) + 1  # the unit ran again: a retry after a failure, a resume
    out.update(run=sent["run"], stage=sent["stage"], result=sent["result"], startedAt=sent["startedAt"],
               stages=list(sent.get("stages") or []), rebootPending=bool(sent.get("rebootPending")),
               reportedAt=stamp(now))
    for key in ("exitCode", "hint", "error", "endedAt", "rebooted"):
        out.pop(key, None)
    if sent["result"] == "failed":
        out.update(outcome=FAILED, endedAt=stamp(now), error=str(body.get("reason") or "")[:MAX_TEXT])
        out.update({k: sent[k] for k in ("exitCode", "hint") if sent.get(k) is not None})
    elif body.get("state") == "Done":
        out.update(outcome=DONE, endedAt=stamp(now))
    else:
        out["outcome"] = RUNNING
    return out


def _after_first_boot(prev: Optional[Dict[str, Any]], body: Dict[str, Any], now: float) -> Optional[Dict]:
    """A report without the object (the day-2 loop's, after the first boot's reboot) ends a first
    boot that is not over: Done on a Done report; Failed on a Degraded one (after the reboot: the
    node booted another OS image than its config's, the failed pivot of MCO-2224); a Working one
    keeps it running (an update under way) and counts as a report."""
    if prev is None or prev["outcome"] == DONE:
        return prev
    out = dict(prev, reportedAt=stamp(now))
    state = body.get("state")
    if prev.get("rebootPending") and state in ("Done", "Degraded"):
        out["rebooted"] = stamp(now)
    if state == "Done":
        for key in ("exitCode", "hint", "error"):
            out.pop(key, None)
        out.update(outcome=DONE, endedAt=stamp(now))
    elif state == "Degraded":
        out.pop("exitCode", None)
        out.pop("hint", None)
        out.update(outcome=FAILED, endedAt=stamp(now), error=str(body.get("reason") or "")[:MAX_TEXT],
                   stage="reboot" if prev.get("rebootPending") else prev.get("stage", ""))
    return out


def stamp(epoch: float) -> str:
    """RFC 3339 in UTC with milliseconds (``2026-11-28T09:14:03.120Z``), as the node's own times:
    a stall is decided to the deadline, not to the second before it."""
    import datetime

    at = datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def is_open(report: Optional[Dict[str, Any]]) -> bool:
    """Whether a stored report holds a first boot that is not Done (Running, Failed, or Stalled by
    the time it is read): what the node store indexes, so that views cost O(open first boots)."""
    rec = (report or {}).get(KEY)
    return isinstance(rec, dict) and rec.get("outcome") in (RUNNING, FAILED)


# -- the decision ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Decision:
    outcome: str
    stage: str
    since: float  # when it came to this outcome (Stalled: the deadline after the last report)
    last_report: float
    deadline: float
    message: str
    reboot_pending: bool = False

    @property
    def reason(self) -> str:
        return REASONS[self.outcome]

    @property
    def warning(self) -> bool:
        return self.outcome in (FAILED, STALLED)

    def token(self, rec: Dict[str, Any]) -> str:
        """What one announcement is about: a new failure (run, stage) or stall (last report) is
        another; a first boot running or done is one state however many reports it sends."""
        if self.outcome == FAILED:
            return f"{FAILED}/{self.stage}/{rec.get('run', '')}/{rec.get('endedAt', '')}"
        if self.outcome == STALLED:
            return f"{STALLED}/{self.stage}/{rec.get('reportedAt', '')}"
        return self.outcome


def decide(rec: Optional[Dict[str, Any]], now: float, deadline: float) -> Optional[Decision]:
    """The first boot's outcome at ``now``: the stored one, or Stalled (ours) when it has run
    without a report for ``deadline`` seconds. None without a record."""
    if not isinstance(rec, dict) or rec.get("outcome") not in OUTCOMES:
        return None
    stage = str(rec.get("stage") or "")
    last = epoch_of(rec.get("reportedAt")) or 0.0
    pending = bool(rec.get("rebootPending")) and not rec.get("rebooted")
    outcome = rec["outcome"]
    if outcome == RUNNING and now - last >= deadline:
        what = (f"it reported \"reboot pending\" after stage {stage} at {iso8601(last)} and has not come back from "
                f"that reboot" if pending else f"its last report was stage {stage} at {iso8601(last)}")
        return Decision(STALLED, stage, last + deadline, last, deadline,
                        f"no report for {span(now - last)} (deadline {span(deadline)}): {what}", pending)
    if outcome == FAILED:
        code = rec.get("exitCode")
        head = str(rec.get("error") or "").split("\n", 1)[0]
        return Decision(FAILED, stage, epoch_of(rec.get("endedAt")) or last, last, deadline,
                        f"failed at stage {stage}" + (f" (exit {code})" if code is not None else "") +
                        (f": {head}" if head else ""), pending)
    if outcome == DONE:
        ended = epoch_of(rec.get("endedAt")) or last
        return Decision(DONE, stage, ended, last, deadline,
                        f"done in {span(ended - (epoch_of(rec.get('began')) or ended))}", False)
    return Decision(RUNNING, stage, epoch_of(rec.get("began")) or last, last, deadline,
                    f"running: stage {stage} reported at {iso8601(last)}" +
                    (", reboot pending" if pending else ""), pending)


def duration(rec: Dict[str, Any]) -> Optional[float]:
    """Seconds from the first boot's beginning to its end (Done or Failed), None before."""
    began, ended = epoch_of(rec.get("began")), epoch_of(rec.get("endedAt"))
    return None if began is None or ended is None else max(0.0, ended - began)


def deadline_of(pool: Optional[Dict[str, Any]], default: float) -> float:
    """The pool's own deadline (annotation ``node-agent.io/firstboot-deadline``, checked when the
    pool is loaded: agent/core/objectchecks.py), else ``default``."""
    value = (((pool or {}).get("metadata") or {}).get("annotations") or {}).get(FIRSTBOOT_DEADLINE_ANNOTATION)
    if value is None:
        return default
    try:
        return parse_deadline(value)
    except ValueError:  # the loader leaves such a pool out; never fail a view for it
        return default


def span(seconds: float) -> str:
    """``45s``, ``31m``, ``1h30m``, ``2d3h``: a duration to read, as kubectl's ages but whole."""
    s = max(0, int(round(seconds)))
    if s < 120:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m" + (f"{s % 60}s" if s < 600 and s % 60 else "")
    if s < 2 * 86400:
        return f"{s // 3600}h" + (f"{s % 3600 // 60}m" if s % 3600 // 60 else "")
    return f"{s // 86400}d" + (f"{s % 86400 // 3600}h" if s % 86400 // 3600 else "")


def summary(decided: Iterable[Tuple[str, Decision, Dict[str, Any]]], limit: int = VIEW_NODES) -> Dict[str, Any]:
    """A pool's open first boots (``(node, decision, record)``): how many run, failed and stalled,
    by stage (``stages``: outcome -> stage -> count), and the failed and stalled ones by name (the
    first ``limit``)."""
    counts = {"running": 0, "failed": 0, "stalled": 0}
    stages: Dict[str, Dict[str, int]] = {}
    nodes: Dict[str, Dict[str, Any]] = {}
    for node, d, rec in sorted(decided, key=lambda item: item[0]):
        counts[d.outcome.lower()] = counts.get(d.outcome.lower(), 0) + 1
        by_stage = stages.setdefault(d.outcome, {})
        by_stage[d.stage] = by_stage.get(d.stage, 0) + 1
        if d.warning and len(nodes) < limit:
            nodes[node] = {"outcome": d.outcome, "reason": d.reason, "stage": d.stage, "since": iso8601(d.since),
                           "message": d.message, **({"exitCode": rec["exitCode"]} if "exitCode" in rec else {})}
    out: Dict[str, Any] = dict(counts, stages=stages)
    if nodes:
        out["nodes"] = nodes
    return out
