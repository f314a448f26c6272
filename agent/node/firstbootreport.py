"""What a first boot tells the server of itself: the ``firstBoot`` object of each of its reports
(docs/api.md, "Report body"), and the words of a failure.

Every report of a first boot carries the run's id, the stage it is sent from, how the run stands
(running, done, failed) and the stages so far with their times, so that the server shows a first
boot's progress and notices one that stops (agent/server/rollout/firstboots.py). A failed run
reports from the first stage that reached the server on: the stage that failed, the exit code,
and the error and "what to do" line in the very words of the run's journal entry
(``failure_words`` gives both, from the same exception, through the same function
``status.hint_for_error`` that ``RunRecorder.finish`` logs with).
"""

from typing import Any, Dict, List, Optional, Tuple

from agent.errors import EXIT_INTERNAL, NodeAgentError

MAX_TEXT = 1000  # characters of the what-to-do line sent (as report.MAX_TEXT for the reason)
MAX_STAGES = 32  # as the server takes (firstboots.MAX_STAGES)


def failure_words(exc: BaseException) -> Tuple[str, str, int]:
    """(error, what to do, exit code) of the exception that ends a run: what the run's one
    journal entry says (``firstboot failed (exit N) in Ts: <error>`` / ``what to do: <hint>``)."""
    from agent.node.status import hint_for_error

    if isinstance(exc, NodeAgentError):
        error, code = str(exc), exc.exit_code
    else:
        error, code = f"internal error: {type(exc).__name__}: {exc}", EXIT_INTERNAL
    return error, hint_for_error(exc, code), code


def failed_stage(rec: Any) -> str:
    """The stage that failed (the last one marked failed), else the last one begun."""
    stages = rec.data.get("stages") or []
    failed = [s["name"] for s in stages if s.get("result") == "failed"]
    return (failed or [s["name"] for s in stages] or ["fetch"])[-1]


def first_boot_object(rec: Any, stage: str, result: str, exit_code: Optional[int] = None,
                      hint: Optional[str] = None, reboot_pending: bool = False) -> Dict[str, Any]:
    """The ``firstBoot`` object of a report sent from ``stage`` of the run ``rec`` records."""
    stages: List[Dict[str, Any]] = []
    for s in (rec.data.get("stages") or [])[-MAX_STAGES:]:
        item = {k: s[k] for k in ("name", "startedAt", "seconds", "result") if s.get(k) is not None}
        stages.append(item)
    out: Dict[str, Any] = {"run": rec.run_id, "startedAt": rec.data["startedAt"], "stage": stage, "result": result,
                           "elapsed": round(max(0.0, rec.elapsed), 3), "stages": stages}
    if reboot_pending:
        out["rebootPending"] = True
    if exit_code is not None:
        out["exitCode"] = int(exit_code)
    if hint:
        out["hint"] = hint if len(hint) <= MAX_TEXT else hint[:MAX_TEXT - 1] + "\u2026"
    return out


def pointer_url(pointer: Dict[str, Any]) -> str:
    """The pool's config URL the pointer config names itself (``.../config/<pool>``), "" when its
    references name none: known before anything is fetched, so a fetch that fails is reported
    to that server too (the pool it asks for is in the URL)."""
    refs = ((pointer.get("ignition") or {}).get("config") or {}) if isinstance(pointer, dict) else {}
    if not isinstance(refs, dict):
        return ""
    merge = refs.get("merge")
    candidates = [refs.get("replace")] + (merge if isinstance(merge, list) else [])
    for ref in candidates:
        source = ref.get("source") if isinstance(ref, dict) else None
        if isinstance(source, str) and source.startswith(("http://", "https://")) and "/config/" in source:
            return source
    return ""
