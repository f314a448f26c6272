"""The node's turn in its pool's rollout, as the server decides it (day 2).

The server targets nodes (agent/server/rollout/targeting.py): a member is served its desired
config, which is the config it runs until its turn comes. Each answer says where the node stands
(``X-Rollout``: updating, done, waiting, deferred, with ``X-Rollout-Reason``), and a server that
holds an unchanged member fetch until its desired config changes (a long poll: ``?wait=`` with
``If-None-Match``) says how long it holds (``X-Rollout-Hold``). This module keeps what the node
learns (``rollout.json``, shown by ``node-agent status``), logs each change once, and after a
revert or a retarget (the node is served the config it runs, after it failed another) tells the
server it is Done on it.
"""

import logging
import os
import time
import urllib.parse
from typing import Any, Dict, Optional

from agent.errors import NotReady
from agent.host.root import Root
from agent.node import nodestate

log = logging.getLogger(__name__)

LAST_SENT = "last-report.json"  # the newest report the server took (agent/node/report.py keeps it)
HOLD = 25.0  # seconds the day-2 loop asks the server to hold an unchanged fetch (its MAX_HOLD)
HELD_IDLE = 1.0  # seconds between two held fetches (the drift monitor looks at the disk meanwhile)


def with_wait(url: str, hold: float) -> str:
    """``url`` asking the server to hold an unchanged answer ``hold`` seconds (``?wait=``)."""
    parts = urllib.parse.urlsplit(url)
    query = urllib.parse.parse_qsl(parts.query, keep_blank_values=True) + [("wait", f"{hold:g}")]
    return urllib.parse.urlunsplit(parts._replace(query=urllib.parse.urlencode(query)))


def held(headers: Dict[str, str]) -> bool:
    """Whether the server holds unchanged fetches (then the loop asks again at once)."""
    return bool({k.lower(): v for k, v in (headers or {}).items()}.get("x-rollout-hold"))


def follow(root: Root, state_dir: str, headers: Dict[str, str], before: Optional[Dict[str, Any]],
           now: Optional[float] = None) -> Optional[Dict[str, Any]]:
    """What the server says of the node's turn; logged and kept when it changed. None: the server
    said nothing (an older one, or not a member's fetch)."""
    h = {k.lower(): v for k, v in (headers or {}).items()}
    state = h.get("x-rollout")
    if not state:
        return before
    seen = {"state": state, "reason": h.get("x-rollout-reason", ""), "config": h.get("x-served-config", "")}
    if before is not None and all(before.get(k) == v for k, v in seen.items()):
        return before
    seen["since"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() if now is None else now))
    nodestate.save_rollout(root, state_dir, seen)
    if state == "waiting":
        log.info("waiting for its turn: %s (the node keeps %s)", seen["reason"], seen["config"])
    elif state == "deferred":
        log.warning("the server deferred this node's update: %s", seen["reason"])
    elif state == "updating":
        log.info("targeted by the server: updating to %s", seen["config"])
    return seen


def remember(root: Root, state_dir: str, body: Dict[str, Any]) -> None:
    """Keep the newest report the server took (a hint for ``confirm_done``: losing it costs a report)."""
    try:
        nodestate.write_json(root.path(os.path.join(state_dir, LAST_SENT)), body)
    except OSError as exc:
        log.debug("could not keep the last report: %s", exc)


def last_sent(root: Root, state_dir: str) -> Optional[Dict[str, Any]]:
    data = nodestate.read_json(root.path(os.path.join(state_dir, LAST_SENT)))
    return data if isinstance(data, dict) else None


def not_its_turn(rollout: Optional[Dict[str, Any]]) -> bool:
    """Whether the server said the node waits (or was deferred): the config it served then is the
    one the node runs, for information; the node applies nothing (only its desired config, once
    targeted, is to be applied)."""
    return bool(rollout) and rollout.get("state") in ("waiting", "deferred")  # type: ignore[union-attr]


def confirm_done(reporter: Any, pool: str, current: str, drifted: bool) -> bool:
    """After a revert or a retarget the node is served the config it runs: a node whose last
    report was on its way to another config (Working or Degraded with another desiredConfig) says
    it is Done on this one, so the server counts it again. Never while a reboot is pending, nor
    over drift or a Degraded report about the config it runs (those stand until they clear).
    Returns whether it reported."""
    last = last_sent(reporter.root, reporter.state_dir) or {}
    elsewhere = last.get("desiredConfig") not in (None, "", current) and last.get("state") != "Done"
    if not elsewhere or drifted or nodestate.reboot_pending(reporter.root, reporter.state_dir) is not None:
        return False
    log.info("served %s, the config this node runs: reporting Done on it (it last reported %s on its way to %s)",
             current, last.get("state"), last.get("desiredConfig"))
    return reporter.send({"pool": pool, "state": "Done", "currentConfig": current, "desiredConfig": current})


class UpdateDeferred(NotReady):
    """The server deferred this node's update (its drain held past the pool's limit by a
    PodDisruptionBudget), or retargeted it before it started: the node keeps its config and
    starts over with its desired config on its next pass (exit 75)."""


def deferral(resp: Any) -> Optional[str]:
    """The reason of a drain answer saying the update is deferred (409 ``"status": "deferred"``), else None."""
    if resp.status_code != 409:
        return None
    try:
        answer = resp.json()
    except ValueError:
        return None
    if isinstance(answer, dict) and answer.get("status") in ("deferred", "retargeted"):
        return str(answer.get("reason") or answer["status"])
    return None
