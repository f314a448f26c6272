"""``node-agent status [--root DIR] [--format json|yaml|tabular] [--long] [--wait]``: result and
stage timings of the last run (``--json`` is ``--format json``; the options are cloud-init
``status``'s).

Exit codes follow upstream ``cloud-init status`` (cloudinit/cmd/status.py since 23.4, "Cloud-init
error codes": 0 success, also while running; 1 unrecoverable error; 2 recoverable error, its
"degraded done"): 0 done (or still running), 1 failed or interrupted, 2 degraded. Two differences,
chosen knowingly: "never run" is 1, where cloud-init's "not run" is 0 (on a node node-agent is
meant to provision, no record means it did not run, and a health check must notice); and 2
stays 2, where RHEL's cloud-init maps it back to 0 (RHEL-28549).

A report kept for later (``pending-report.json``) is shown; one the server *refused* makes the
result degraded (the node works, but the server does not count it) until it is delivered.

On-disk drift the day-2 loop found (``drift.json``, agent/node/drift.py) makes the result
degraded as well, each drifted path listed with what differs, until a check finds none (the
file restored, or ``node-agent update --force``); storage changes kept as installed under
``irreconcilableValidationOverrides.storage`` (``irreconcilable.json``) are listed, not degrading.

``--wait`` blocks until the first boot has ended (as ``cloud-init status --wait``), printing a
dot per second on a terminal, then answers as without it.
"""

import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from agent.host.root import Root
from agent.node.status import STATE_DIR, read_status, status_path

EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_DEGRADED = 2


def _alive(pid: object) -> bool:
    """Whether the live system still runs node-agent as ``pid``."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            # "node-agent ..." or "python3 -m agent ..."; another program that got the pid is not us
            return b"agent" in f.read()
    except OSError:
        return False


def effective_result(data: dict, root: Root, kept: Optional[Dict[str, Any]] = None,
                     drifted: bool = False) -> str:
    """done | failed | degraded | running | interrupted (running, but its process is gone).

    ``kept``: the kept report, if any. A refused one degrades a done run; a run degraded only by
    a refused report is done again once no refused report is kept (it was delivered since).
    ``drifted``: on-disk drift of the current config is recorded: a done run, or one that
    refused to apply over the drift (exit 79), is degraded.
    """
    from agent.errors import EXIT_DRIFTED

    result = data.get("result")
    if result == "running" and root.is_live and not _alive(data.get("pid")):
        return "interrupted"
    refused = bool(kept and kept.get("refused"))
    if drifted and (result == "done" or (result == "failed" and data.get("exitCode") == EXIT_DRIFTED)):
        return "degraded"
    if result == "done" and refused:
        return "degraded"
    if result == "degraded" and data.get("degradedBy") == "report" and not refused:
        return "done"
    return str(result)


def report_line(kept: Optional[Dict[str, Any]], error: Optional[str] = None) -> Optional[str]:
    """The ``report:`` line of the human output for a kept report, or None."""
    if not kept:
        return None
    from agent.node.report import refusal_text

    if kept.get("refused"):
        text = refusal_text(kept["refused"])
        if error and text in error:  # the error line already says why and what to do
            return f"refused (HTTP {kept['refused'].get('status')}), kept since {kept.get('keptAt', '?')}"
        return f"refused, kept since {kept.get('keptAt', '?')}: {text}"
    return (f"pending since {kept.get('keptAt', '?')} ({kept.get('error') or 'not delivered'}); "
            f"node-agent.service sends it again")


def drift_lines(drift: Optional[Dict[str, Any]], irreconcilable: Optional[Dict[str, Any]]) -> List[str]:
    """The ``drift:`` block (each drifted path and what differs) and the ``irreconcilable:`` line."""
    lines: List[str] = []
    drifted = (drift or {}).get("drifted") or []
    if drifted:
        lines.append(f"drift: {len(drifted)} path{' differs' if len(drifted) == 1 else 's differ'} from "
                     f"{drift.get('config')} on disk (checked {drift.get('checkedAt')}):")
        lines.extend(f"  {d.get('path')}: {'; '.join(d.get('differences') or [])}" for d in drifted)
        lines.append("  what to do: restore them, or re-apply the config: node-agent update --force "
                     "(or touch /run/node-agent-force)")
    if irreconcilable and irreconcilable.get("differences"):
        lines.append(f"irreconcilable: {', '.join(irreconcilable['differences'])} of {irreconcilable.get('config')} "
                     "differ from the install-time config; kept as installed (irreconcilableValidationOverrides"
                     ".storage): new nodes get them")
    return lines


def not_applied(data: Dict[str, Any], result: str, running: Optional[str]) -> bool:
    """Whether the last run was an update that failed (rolled back) to a config the node does
    not run: ``running``, its current config (``current.json``)."""
    return (data.get("command") == "update" and result in ("failed", "degraded", "interrupted")
            and bool(running) and bool(data.get("config")) and data.get("config") != running)


def rollout_lines(rollout: Optional[Dict[str, Any]], failed: Optional[str] = None) -> List[str]:
    """The ``rollout:`` line: the node's turn in its pool's rollout as the server last said it;
    ``failed``: the config the node runs, when its update to the served one failed (the server's
    "updating" is then no longer what happens here)."""
    if not rollout or not rollout.get("state"):
        return []
    if failed and rollout.get("state") == "updating":
        return [f"rollout: targeted to {rollout.get('config')} (since {rollout.get('since')}), its update FAILED: "
                f"the node runs {failed} (the error above says why and what to do)"]
    text = {"waiting": "waiting for its turn", "updating": "targeted, updating", "done": "done",
            "deferred": "deferred by the server"}.get(str(rollout["state"]), str(rollout["state"]))
    why = rollout.get("reason") or ""
    return [f"rollout: {text} (served {rollout.get('config')}, since {rollout.get('since')})" + (f": {why}" if why else "")]


def _drift_records(root: Root, state_dir: str):
    """The drift record when it is about the config the node is at, and the irreconcilable record."""
    from agent.node import nodestate
    from agent.node.drift import read_record

    drift = read_record(root, state_dir)
    current = nodestate.load_current(root, state_dir) or {}
    if drift and current.get("name") and drift.get("config") != current.get("name"):
        drift = None  # about a config the node has left since
    return drift, nodestate.load_irreconcilable(root, state_dir)


def exit_code_for(result: Optional[str]) -> int:
    if result in ("done", "running"):
        return EXIT_DONE
    if result == "degraded":
        return EXIT_DEGRADED
    return EXIT_FAILED


def _seconds(value: object) -> str:
    return f"{value:.3f}s" if isinstance(value, (int, float)) else "-"


def _since(started: object, now: Optional[float] = None) -> Optional[float]:
    """Seconds from an RFC 3339 ``...Z`` timestamp of ours to now (None when unreadable)."""
    import datetime

    try:
        when = datetime.datetime.strptime(str(started), "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (now if now is not None else time.time()) - when.timestamp())


def _running_detail(stage: dict, now: Optional[float] = None) -> str:
    """A running stage: how long so far, and for a retrying fetch the attempt and the next retry."""
    parts = []
    elapsed = _since(stage.get("startedAt"), now)
    if elapsed is not None:
        parts.append(f"{elapsed:.1f}s so far")
    if stage.get("attempt"):
        failed = f"attempt {stage['attempt']} failed"
        if stage.get("lastError"):
            failed += f": {stage['lastError']}"
        parts.append(failed)
    if stage.get("nextRetryAt"):
        parts.append(f"next retry at {stage['nextRetryAt']}")
    return "; ".join(parts)


def _stage_line(s: dict, width: int, long: bool, now: Optional[float]) -> str:
    seconds = _seconds(s.get("seconds"))
    if s.get("result") == "running":
        elapsed = _since(s.get("startedAt"), now)
        seconds = f"{elapsed:.1f}s.." if elapsed is not None else seconds
    line = f"  {seconds:>10}  {str(s.get('name', '')):<{width}}  {s.get('result', '')}"
    detail = _running_detail(s, now) if s.get("result") == "running" else s.get("detail")
    if s.get("result") == "running" and s.get("detail"):
        detail = f"{s['detail']}; {detail}" if detail else s["detail"]
    if detail:
        line += f"  ({detail})"
    if long:
        line += f"  [started {s.get('startedAt')}"
        if s.get("attempt") and s.get("result") != "running":
            line += f", {s['attempt']} failed attempt(s)"
        line += "]"
    return line.rstrip()


def render(data: dict, result: str, firstboot: Optional[dict] = None,
           kept: Optional[Dict[str, Any]] = None, long: bool = False, now: Optional[float] = None,
           where: Optional[str] = None, extra: Optional[List[str]] = None, running: Optional[str] = None) -> str:
    """Human output: a ``cloud-init status --long`` header, then the stages with their timings
    (a running one with its time so far, fetch attempt and next retry); ``long``: also each
    stage's start and the record's file; ``running``: the config the node runs (``current.json``),
    named beside the one a failed update did not apply."""
    lines: List[str] = [f"status: {result}"]
    config = data.get("config")
    if not_applied(data, result, running):
        config = f"{config} (NOT applied: the update failed; the node runs {running})"
    if result == "interrupted":
        lines.append("detail: the run stopped without finishing (crash, kill or power loss) "
                     "during the stage marked 'running' below")
    rows = [
        ("command", data.get("command")),
        ("run", data.get("runId")),
        ("started", data.get("startedAt")),
        ("finished", data.get("finishedAt")),
        ("duration", _seconds(data.get("seconds")) if data.get("seconds") is not None else None),
        ("exit code", data.get("exitCode")),
        ("pool", data.get("pool")),
        ("config", config),
        ("reboot pending", "yes" if data.get("rebootPending") else "no"),
        ("error", data.get("error")),
        ("report", report_line(kept, data.get("error"))),
        ("record", where if long else None),
    ]
    for name, value in rows:
        if value is not None and value != "":
            lines.append(f"{name}: {value}")
    stages = data.get("stages") or []
    if stages:
        lines.append("stages:")
        width = max(len(str(s.get("name", ""))) for s in stages)
        lines.extend(_stage_line(s, width, long, now) for s in stages)
    lines.extend(extra or [])
    if data.get("rebootPending"):
        lines.append("A reboot is pending: the applied changes take effect after the next boot.")
    if firstboot is not None and data.get("command") != "firstboot":
        lines.append(f"first boot: {firstboot.get('result')} (exit {firstboot.get('exitCode')}) "
                     f"at {firstboot.get('finishedAt') or firstboot.get('startedAt')}, "
                     f"{_seconds(firstboot.get('seconds'))}")
    return "\n".join(lines) + "\n"


def _running_config(root: Root, state_dir: str) -> Optional[str]:
    """The name of the config the node runs (``current.json``), None when unknown or unreadable."""
    from agent.node import nodestate

    try:
        return (nodestate.load_current(root, state_dir) or {}).get("name") or None
    except (OSError, ValueError):  # an unreadable record hides nothing else
        return None


def _kept_report(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    from agent.node.report import PENDING, read_kept

    return read_kept(root.path(os.path.join(state_dir, PENDING)))


def _first_boot_ended(root: Root, state_dir: str) -> bool:
    """Whether the first boot has a final record (done, failed, degraded) or died mid-run."""
    try:
        data = read_status(root, state_dir, "firstboot")
    except Exception:  # being rewritten or unreadable: not ended as far as we can tell
        return False
    if data is None:
        return False
    return effective_result(data, root) != "running"


def wait_for_first_boot(root: Root, state_dir: str, interval: float = 1.0, sleep=time.sleep,
                        dots: bool = False) -> None:
    while not _first_boot_ended(root, state_dir):
        if dots:
            print(".", end="", flush=True)
        sleep(interval)
    if dots:
        print(flush=True)


def _dump(doc: Any, fmt: str) -> str:
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)
    return json.dumps(doc, indent=2) + "\n"


def _where(root: Root, state_dir: str) -> str:
    where = status_path(state_dir)
    return where if root.is_live else os.path.join(root.top, where.lstrip("/"))


def run(args) -> int:
    root = Root(getattr(args, "root", "/") or "/")
    state_dir = getattr(args, "state_dir", None) or STATE_DIR
    fmt = getattr(args, "format", None) or ("json" if getattr(args, "json", False) else "tabular")
    long = bool(getattr(args, "long", False)) or fmt == "wide"  # -o wide: kubectl's "more columns", --long
    fmt = "tabular" if fmt == "wide" else fmt
    if getattr(args, "wait", False):
        wait_for_first_boot(root, state_dir, dots=fmt == "tabular" and sys.stdout.isatty())
    data = read_status(root, state_dir)
    kept = _kept_report(root, state_dir)
    where = _where(root, state_dir)
    if data is None:
        if fmt != "tabular":
            sys.stdout.write(_dump({"result": "not-run", "statusFile": where}, fmt))
        else:
            print(f"status: not run\ndetail: node-agent has not run on this node (no {where})")
        return EXIT_FAILED
    drift, irreconcilable = _drift_records(root, state_dir)
    from agent.node.nodestate import load_rollout

    rollout = load_rollout(root, state_dir)
    result = effective_result(data, root, kept, drifted=bool((drift or {}).get("drifted")))
    running = _running_config(root, state_dir)
    failed = running if not_applied(data, result, running) else None
    if fmt != "tabular":
        out = dict(data)
        out["result"] = result
        if kept:
            out["keptReport"] = kept
        if drift:
            out["drift"] = drift
        if irreconcilable:
            out["irreconcilable"] = irreconcilable
        if rollout:
            out["rollout"] = rollout
        if failed:
            out["runningConfig"] = failed  # the node runs it: the update to out["config"] failed
        sys.stdout.write(_dump(out, fmt))
    else:
        firstboot = None
        if data.get("command") != "firstboot":
            try:
                firstboot = read_status(root, state_dir, "firstboot")
            except Exception:  # an unreadable old record must not hide the current one
                firstboot = None
        print(render(data, result, firstboot, kept, long=long, where=where, running=running,
                     extra=rollout_lines(rollout, failed) + drift_lines(drift, irreconcilable)), end="")
    return exit_code_for(result)
