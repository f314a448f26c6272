"""Ours (issue 49): a pool's render review on the service (agent/server/rollout/review.py decides).

- ``gate``: in the pool row's compare-and-swap (rolloutctl), a new rendering the pool requires an
  acknowledgement for waits (RenderHeld, reason AwaitingAcknowledgement); the row's rollout record
  keeps ``awaitingAck`` (``{"config", "since"}``) and the admin's ``acknowledged`` (``{"config",
  "at", "by"}``).
- ``announce``: said once, by the process whose write stored the row (as the SetDesiredConfig
  Event): a new rendering's validator warnings (log, and with ``--backend kubernetes`` a Warning
  Event ``RenderWarnings`` on the pool), a rendering newly held (Warning ``AwaitingAcknowledgement``).
- ``add_to_view``: ``status.renderWarnings``, ``status.review`` of a held rendering, the
  ``RenderWarnings`` condition, RenderHeld's reason.
- ``acknowledge``: ``node-config-server ack pool NAME`` (``POST /api/v1/pools/<pool>/ack``).
"""

import logging
import time
from typing import Any, Dict, List, Optional

from agent.core.rolloutpolicy import RolloutPolicy
from agent.server.cluster import poolview
from agent.server.rollout import review
from agent.server.rollout.progress import Step
from agent.server.store.nodestore import PoolRow

log = logging.getLogger(__name__)


class NothingToAcknowledge(ValueError):
    """No rendering of the pool waits for the admin (or not the one named); the message says which."""


def pool_warnings(cluster: Any, st: Any, pool: str, config: Optional[str] = None) -> List[str]:
    """The validator warnings of the pool and of the MachineConfigs a rendering (``config``; None:
    the pool's newest) renders from."""
    r = cluster._rendered.get(pool) if config is None else cluster._by_name.get(config)
    return review.warnings_of(st.warnings, pool, r.sources if r is not None else ())


def review_of(cluster: Any, st: Any, pool: str, base: str, config: str) -> review.Review:
    """``config`` against ``base`` (its warnings, what its nodes would do), kept per state."""
    key = ("review", st.signature, pool, base, config)
    if key not in cluster._decisions:
        plan = poolview.plan_between(cluster.spec_of, st.cluster_spec, base, config)
        cluster._remember(key, review.review_of(config, base, pool_warnings(cluster, st, pool, config), plan))
    return cluster._decisions[key]


def gate(cluster: Any, st: Any, pool: str, policy: RolloutPolicy, row: Optional[PoolRow], step: Step,
         rendered: str, rollout: Dict[str, Any], now: float) -> Step:
    """``step``, or the same step holding the pool's target while ``rendered`` waits for the
    admin (review.reviewed_step); ``rollout`` (the row's record, changed in place) says so."""
    if row is None:  # a pool's first target: nothing runs another config yet
        return step
    acked = [a for a in (policy.acknowledged, (rollout.get("acknowledged") or {}).get("config")) if a]
    step, held = review.reviewed_step(step, row.target, rendered, policy.require_ack, acked,
                                      lambda: review_of(cluster, st, pool, row.target, rendered), pool)
    if held is None:
        rollout.pop("awaitingAck", None)
    else:
        before = rollout.get("awaitingAck") or {}
        rollout["awaitingAck"] = {"config": held.config,
                                  "since": before["since"] if before.get("config") == held.config else now}
    return step


def announce(cluster: Any, st: Any, pool: str, old: Optional[PoolRow], new: PoolRow) -> None:
    """What the write of ``new`` (over ``old``) tells: a new rendering's warnings, a new hold."""
    if old is None or old.rendered != new.rendered:
        found = pool_warnings(cluster, st, pool, new.rendered)
        if found:
            message = review.warnings_condition(found, new.rendered)["message"]
            log.warning("pool %s: %s", pool, message)
            cluster.pool_event(pool, "Warning", review.CONDITION, message)
    held = (new.rollout.get("awaitingAck") or {}).get("config")
    if held and held != (((old.rollout if old is not None else {}).get("awaitingAck")) or {}).get("config"):
        log.warning("pool %s: %s", pool, new.held)
        cluster.pool_event(pool, "Warning", review.HELD_REASON, new.held)


def add_to_view(cluster: Any, st: Any, pool: str, row: PoolRow, status: Dict[str, Any]) -> None:
    """The pool view's review: its newest rendering's warnings and condition, a held rendering's review."""
    found = pool_warnings(cluster, st, pool)
    if found:
        status["renderWarnings"] = found[:review.LISTED]
    waiting = row.rollout.get("awaitingAck") or {}
    if waiting.get("config"):
        status["review"] = dict(review_of(cluster, st, pool, row.target, str(waiting["config"])).to_dict(),
                                since=waiting.get("since"), held=True)
        for c in status.get("conditions") or []:
            if c.get("type") == "RenderHeld" and c.get("status") == "True":
                c["reason"] = review.HELD_REASON
    r = cluster._rendered.get(pool)
    cond = review.warnings_condition(found, r.name if r else row.rendered)
    poolview.add_recorded_time(cond, row.rollout)  # recorded by the pool's step
    status.setdefault("conditions", []).append(cond)


def acknowledge(cluster: Any, pool: str, config: str = "") -> Dict[str, Any]:
    """The admin acknowledges the rendering of ``pool`` that waits (``config``: only if it is that
    one): it becomes the target at the pool's next step. NothingToAcknowledge when none waits."""
    row = cluster.store.pools().get(pool)
    if pool not in cluster.state().pools or row is None:
        raise NothingToAcknowledge(f"unknown pool {pool!r}")
    waiting = str((row.rollout.get("awaitingAck") or {}).get("config") or "")
    if not waiting:
        raise NothingToAcknowledge(f"no rendering of pool {pool} waits for an acknowledgement (its target is "
                                   f"{row.target})")
    if config and config != waiting:
        raise NothingToAcknowledge(f"{config} is not what waits in pool {pool}: {waiting} does")

    def decide(old: Optional[PoolRow]) -> Optional[PoolRow]:
        if old is None:
            return None
        rollout = dict(old.rollout, acknowledged={"config": waiting, "at": time.time(), "by": "admin"})
        return PoolRow(old.name, old.target, old.current, old.held, old.rendered, rollout)

    cluster.store.update_pool(pool, decide)
    log.warning("pool %s: the admin acknowledged %s: it is the pool's target now (was %s)", pool, waiting, row.target)
    cluster._step_pool(cluster.state(), pool)
    return {"pool": pool, "acknowledged": waiting, "from": row.target,
            "summary": f"pool {pool}: {waiting} acknowledged; it is the target now, the nodes take it in turn"}
