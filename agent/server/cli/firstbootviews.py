"""What the operator views print of first boots (pure: the API's objects in, text out).

A node's ``firstBoot`` (``GET /api/v1/nodes``: agent/server/cluster/firstbootview.py) is its first
boot decided by the server when it was read: Running, Done, Failed (the node said so: stage, exit
code, reason, what to do) or Stalled (no report within the deadline). ``get nodes`` shows it in
the FIRSTBOOT column as kubectl shows a pod's init phase (``Failed:apply``, ``Stalled:fetch``) and
a stall's sentence as the REASON; ``describe node`` the whole record with the stages' times;
``get pools`` and ``describe pool`` name each failed or stalled first boot under the pool
(``status.firstBoots``), so that none is out of sight.
"""

import datetime
from typing import Any, Dict, List, Optional

from agent.server.rollout.firstboots import span

STALLED, FAILED, DONE = "Stalled", "Failed", "Done"


def _when(at: Any) -> str:
    if not isinstance(at, str) or not at:
        return ""
    try:
        t = datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return at
    return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def cell(node: Dict[str, Any]) -> str:
    """The FIRSTBOOT column: ``Done``, or the outcome and the stage (``Running:pool``,
    ``Failed:apply``, ``Stalled:fetch``); ``-`` when the server follows no first boot of the node
    (it first booted before nodes reported first boots)."""
    fb = node.get("firstBoot") or {}
    outcome = str(fb.get("outcome") or "")
    if not outcome:
        return "-"
    return outcome if outcome == DONE or not fb.get("stage") else f"{outcome}:{fb['stage']}"


def reason(node: Dict[str, Any]) -> str:
    """A stalled first boot's sentence (the node could not say it), for the REASON column; "" else."""
    fb = node.get("firstBoot") or {}
    return f"{fb.get('reason')}: {fb.get('message', '')}" if fb.get("outcome") == STALLED else ""


def describe_lines(node: Dict[str, Any]) -> List[str]:
    """``describe node``'s first boot: outcome, when, reason and what to do, the stages' times."""
    fb = node.get("firstBoot")
    if not fb:
        return ["First boot:          <not reported>"]
    lines = [f"First boot:          {fb.get('reason', '')}: {fb.get('message', '')}"]
    runs = f" ({fb.get('runs')} runs)" if (fb.get("runs") or 1) > 1 else ""
    lines.append(f"  Began:             {_when(fb.get('began'))}{runs}")
    lines.append(f"  Last report:       {_when(fb.get('reportedAt'))} (stage {fb.get('stage', '')}"
                 f"{', reboot pending' if fb.get('rebootPending') and not fb.get('rebooted') else ''})")
    if fb.get("endedAt"):
        took = f" after {fb['seconds']:.0f}s" if isinstance(fb.get("seconds"), (int, float)) else ""
        lines.append(f"  Ended:             {_when(fb.get('endedAt'))}{took}")
    if fb.get("outcome") == STALLED:
        lines.append(f"  Stalled since:     {_when(fb.get('since'))} (deadline {span(fb.get('deadlineSeconds') or 0)})")
    if fb.get("outcome") == FAILED:
        if fb.get("exitCode") is not None:
            lines.append(f"  Exit code:         {fb['exitCode']}")
        error = str(fb.get("error") or "").split("\n")
        lines += [f"  Error:             {error[0]}"] + [f"                     {e}" for e in error[1:] if e]
        if fb.get("hint"):
            lines.append(f"  What to do:        {fb['hint']}")
    stages = fb.get("stages") or []
    if stages:
        lines.append("  Stages:")
        rows = [["STAGE", "STARTED", "SECONDS", "RESULT"]] + [
            [str(s.get("name", "")), _when(s.get("startedAt")) or "-",
             f"{s['seconds']:.3f}" if isinstance(s.get("seconds"), (int, float)) else "-",
             _stage_result(s, str(fb.get("outcome") or ""))]
            for s in stages]
        widths = [max(len(r[i]) for r in rows) for i in range(4)]
        lines += ["    " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return lines


def _stage_result(stage: Dict[str, Any], outcome: str) -> str:
    """A stage's result as the view shows it. The node sends its last report from within a stage
    (``report``), which is still running when the report is made: once the first boot has ended,
    that stage is not running any more (a Done one sent the report, a Failed one stopped there)."""
    result = str(stage.get("result", ""))
    if result != "running" or outcome not in (DONE, FAILED):
        return result
    return "ok (sent this report)" if outcome == DONE else "stopped (the run failed)"


def pool_lines(pools: List[Dict[str, Any]], indent: Optional[str] = None) -> List[str]:
    """Each failed or stalled first boot of the pools, one a line (``get pools`` prints them under
    the table prefixed with the pool; ``describe pool``, ``indent`` given, under its counts); a
    name not proven yet (pending) says so."""
    out = []
    for p in pools:
        name = (p.get("metadata") or {}).get("name", "")
        fbs = (p.get("status") or {}).get("firstBoots") or {}
        for node, d in sorted((fbs.get("nodes") or {}).items()):
            head = f"{indent}{node}" if indent is not None else f"{name}: node {node}"
            note = " (not proven yet: its registration is pending)" if d.get("pending") else ""
            out.append(f"{head}: {d.get('reason', '')} since {_when(d.get('since'))}: {d.get('message', '')}{note}")
    return out


def pool_counts(pool: Dict[str, Any]) -> str:
    """``describe pool``'s line: how many first boots run, failed and stalled."""
    fbs = (pool.get("status") or {}).get("firstBoots") or {}
    return (f"First boots:         {fbs.get('running', 0)} running, {fbs.get('failed', 0)} failed, "
            f"{fbs.get('stalled', 0)} stalled")
