"""``node-agent status [--root DIR] [--json]``: result and stage timings of the last run.

Exit codes follow ``cloud-init status``: 0 done (or still running), 1 failed, interrupted or
never run, 2 degraded. "Never run" is 1, not cloud-init's 0: on a node that node-agent is
meant to provision, no record means it did not run, and a health check should notice.
"""

import json
import os
from typing import List, Optional

from agent.host.root import Root
from agent.status import STATE_DIR, read_status, status_path

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


def effective_result(data: dict, root: Root) -> str:
    """done | failed | degraded | running | interrupted (running, but its process is gone)."""
    result = data.get("result")
    if result == "running" and root.is_live and not _alive(data.get("pid")):
        return "interrupted"
    return str(result)


def exit_code_for(result: Optional[str]) -> int:
    if result in ("done", "running"):
        return EXIT_DONE
    if result == "degraded":
        return EXIT_DEGRADED
    return EXIT_FAILED


def _seconds(value: object) -> str:
    return f"{value:.3f}s" if isinstance(value, (int, float)) else "-"


def render(data: dict, result: str, firstboot: Optional[dict] = None) -> str:
    """Human output: a ``cloud-init status --long`` header, then the stages with their timings."""
    lines: List[str] = [f"status: {result}"]
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
        ("config", data.get("config")),
        ("reboot pending", "yes" if data.get("rebootPending") else "no"),
        ("error", data.get("error")),
    ]
    for name, value in rows:
        if value is not None and value != "":
            lines.append(f"{name}: {value}")
    stages = data.get("stages") or []
    if stages:
        lines.append("stages:")
        width = max(len(str(s.get("name", ""))) for s in stages)
        for s in stages:
            line = f"  {_seconds(s.get('seconds')):>10}  {str(s.get('name', '')):<{width}}  {s.get('result', '')}"
            if s.get("detail"):
                line += f"  ({s['detail']})"
            lines.append(line.rstrip())
    if data.get("rebootPending"):
        lines.append("A reboot is pending: the applied changes take effect after the next boot.")
    if firstboot is not None and data.get("command") != "firstboot":
        lines.append(f"first boot: {firstboot.get('result')} (exit {firstboot.get('exitCode')}) "
                     f"at {firstboot.get('finishedAt') or firstboot.get('startedAt')}, "
                     f"{_seconds(firstboot.get('seconds'))}")
    return "\n".join(lines) + "\n"


def run(args) -> int:
    root = Root(getattr(args, "root", "/") or "/")
    state_dir = getattr(args, "state_dir", None) or STATE_DIR
    data = read_status(root, state_dir)
    if data is None:
        where = status_path(state_dir)
        if not root.is_live:
            where = os.path.join(root.top, where.lstrip("/"))
        if getattr(args, "json", False):
            print(json.dumps({"result": "not-run", "statusFile": where}))
        else:
            print(f"status: not run\ndetail: node-agent has not run on this node (no {where})")
        return EXIT_FAILED
    result = effective_result(data, root)
    if getattr(args, "json", False):
        out = dict(data)
        out["result"] = result
        print(json.dumps(out, indent=2))
    else:
        firstboot = None
        if data.get("command") != "firstboot":
            try:
                firstboot = read_status(root, state_dir, "firstboot")
            except Exception:  # an unreadable old record must not hide the current one
                firstboot = None
        print(render(data, result, firstboot), end="")
    return exit_code_for(result)
