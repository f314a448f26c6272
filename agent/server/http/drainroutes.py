"""The drain routes of the HTTP API (a mixin of ``noderoutes.NodeRoutes``): a node asks for its drain
lease (``POST /api/v1/nodes/<node>/drain``) and gives it back (``DELETE``), the Kubernetes backend
drains its Node before granting it (agent/server/cluster/drainpacer.py), and a drain a
PodDisruptionBudget holds too long is deferred (docs/rollout.md)."""

import dataclasses
import logging
import time
from typing import Any, Dict, Optional

from agent.server.http.httpio import HTTPError, Response, json_response
from agent.server.rollout import drains
from agent.server.rollout.progress import ADMIN_APPROVED

log = logging.getLogger(__name__)

MAX_CONFIG_NAME = 4096  # as a report's config names (agent/server/cluster/reports.py)


def released_answer(node: str, pool: Optional[str], real_nodes: bool) -> Dict[str, Any]:
    """What ``DELETE /api/v1/nodes/<node>/drain`` did (pure). With the Kubernetes backend only the
    lease ends: the Node stays cordoned until the node reports Done on the config it was drained
    for (kube_sync uncordons it then, as the MCO's drain controller uncordons once the MCD asks
    after its update), so a node that gave up is not put back to work half-updated. The other
    backends have no Node to cordon: the uncordon is recorded in the node's drain log."""
    out: Dict[str, Any] = {"node": node, "released": pool is not None, "pool": pool or "", "actions": []}
    if pool is None:
        out["effect"] = f"node {node} held no drain lease: nothing changed"
    elif real_nodes:
        out["effect"] = (f"the drain lease in pool {pool} is released; the Node stays cordoned until node {node} "
                         f"reports Done on the config it was drained for (kubectl uncordon {node} to uncordon it now)")
    else:
        out["actions"] = ["uncordon"]
        out["effect"] = (f"the drain lease in pool {pool} is released and an uncordon recorded in the node's drain "
                         f"log (this backend has no Node objects to uncordon)")
    return out


def deferred_answer(cluster: Any, drainer: Any, node: str, pool: str, paced: Any) -> Optional[Response]:
    """Ours: a drain a PodDisruptionBudget has held past ``--drain-defer-after`` is given up: the
    Node is uncordoned with its config, its lease and slot go to the next node, and it is tried
    again once the others are done (targeting.defer). 409 ``"status": "deferred"`` tells the node."""

    from agent.server.cluster.drainpacer import end_drain, held_by_budget
    from agent.server.rollout.draincadence import Cadence, defer_due

    if paced.done or paced.skipped or paced.unknown:
        return None
    why = defer_due(paced.state, drainer.cadence or Cadence(), time.time(), held_by_budget(paced))
    if not why:
        return None
    end_drain(drainer, node)
    drains.release(cluster.store, node, f"deferred: {why}")
    cluster.defer_node(node, pool, why)
    out = {"status": "deferred", "granted": False, "node": node, "pool": pool,
           "reason": f"node {node}: {why}; it is uncordoned and keeps its config, its slot goes to the next "
                     f"node, and it is tried again once the others are done"}
    return json_response(409, out, pool=pool)


def _past_stale_cordons(cluster: Any, node: str, pool: str, config: str, answer: Any) -> Any:
    """A refusal looked at again where this replica's Node cache may be behind (issue 53: a node Done
    and uncordoned, still cordoned in the asking replica's cache, took a slot there and the ask
    waited the lease's Retry-After, 30 s). The Nodes the cache shows cordoned by our drain are read
    from the API: those uncordoned there take no slot, and the lease is asked for again; those still
    cordoned whose Done the store holds, or that hold no lease and the pool no longer targets
    (drains.drains_over: a Done another worker took), are being uncordoned: Retry-After 1
    (drains.sooner)."""
    from agent.server.store.kube.client import KubeError, KubeUnavailable

    truth, pools = cluster.node_truth, cluster.state().pools
    marked = truth.drain_marked(pool, pools, node)
    try:
        fresh = cluster.drainer.uncordoned(marked) if marked and cluster.drainer is not None else []
    except (KubeUnavailable, KubeError) as exc:  # the refusal stands as the cache decided it
        log.warning("reading Nodes %s afresh for node %s's drain ask: %s", ", ".join(marked), node, exc)
        fresh = []
    if fresh:
        answer = drains.request_drain(cluster.store, node, pool, config,
                                      cluster.drain_limit(pool, node, settled=fresh), cluster.lease_ttl)
        answer = dataclasses.replace(answer, max_unavailable=cluster.max_unavailable(pool))
    due = [n for n in truth.uncordoning(pool, pools, node, time.time()) if n not in fresh]
    row = cluster.store.pools().get(pool)
    targeted = set((row.rollout if row is not None else {}).get("targets") or {})
    due += [n for n in drains.drains_over(marked, answer.holders, targeted) if n not in fresh and n not in due]
    if answer.granted or not due:
        return answer
    return drains.sooner(answer, due, cluster.drain_limit(pool, node, settled=due + fresh))


class DrainRoutes:
    """Needs ``self.cluster`` and ``self._known()``."""

    def drain(self, node: str, body: Any) -> Response:
        if not isinstance(body, dict):
            raise HTTPError(400, "the body must be a JSON object {\"pool\": ..., \"config\": ...}", field="$")
        pool = body.get("pool")
        if not isinstance(pool, str) or not pool:
            raise HTTPError(400, "pool: required", field="$.pool")
        config = body.get("config", "")
        if not isinstance(config, str) or len(config) > MAX_CONFIG_NAME:
            raise HTTPError(400, f"config: must be a string of at most {MAX_CONFIG_NAME} characters (a rendered "
                                 f"config's name)", field="$.config")
        cluster = self.cluster
        if pool not in cluster.state().pools:
            raise HTTPError(404, f"unknown pool {pool!r}; known pools: {self._known()}", field="$.pool")
        if cluster.node_truth is not None:  # --backend kubernetes: only an existing Node of that pool, by its
            # labels (kube_nodes.py); the node's report is evidence about that Node, never a claim to a pool
            refused = cluster.node_truth.drain_refusal(node, pool, cluster.state().pools)
            if refused:
                raise HTTPError(409, refused, field="$.pool")
        else:
            member = cluster.node_pool(node)
            if member is not None and member.pool != pool:
                raise HTTPError(409, f"node {node} belongs to pool {member.pool} ({member.why}), not {pool}",
                                field="$.pool")
            reg = cluster.store.registration(node)
            if pool == "master" and reg is not None and reg.managed and reg.by not in ADMIN_APPROVED:
                # Not yet reported (no membership), or reported elsewhere: a rule's approval never reaches master.
                raise HTTPError(409, f"node {node} may not hold a drain lease of the master pool: only a node the "
                                     f"admin approved may be in it (it is approved by {reg.by})", field="$.pool")
        refused = cluster.drain_target_refusal(node, pool, config)
        if refused:  # not a failure of the node: it starts over with its desired config (node-agent: turn.py)
            return json_response(409, {"status": "retargeted", "granted": False, "node": node, "pool": pool,
                                       "reason": refused}, pool=pool)
        answer = drains.request_drain(cluster.store, node, pool, config, cluster.drain_limit(pool, node),
                                      cluster.lease_ttl)
        answer = dataclasses.replace(answer, max_unavailable=cluster.max_unavailable(pool))
        if not answer.granted and cluster.node_truth is not None and cluster.node_truth.ready():
            answer = _past_stale_cordons(cluster, node, pool, config, answer)
        if answer.granted and cluster.drainer is not None:
            return self._drained(cluster.drainer, node, pool, config, answer)
        if answer.granted:
            return json_response(200, answer.to_dict(), pool=pool)
        return json_response(429, answer.to_dict(), [("Retry-After", str(answer.retry_after))], pool=pool)

    def _drained(self, drainer: Any, node: str, pool: str, config: str, answer: Any) -> Response:
        """The Kubernetes backend: the lease is granted only once the Node is cordoned and its
        pods are evicted (agent/server/cluster/kube_drain.py), attempts paced as the MCO's drain
        controller paces them (agent/server/cluster/drainpacer.py). Until then the node keeps its
        slot and is told when to ask again; what holds the drain (a PodDisruptionBudget, a pod
        that cannot be evicted) and since when is in the answer. A single-node cluster never
        drains: granted at once, the answer says why."""
        from agent.server.cluster.drainpacer import paced_drain
        from agent.server.store.errors import StoreUnavailable
        from agent.server.store.kube.client import KubeError, KubeUnavailable

        try:
            paced = paced_drain(drainer, node, config)
        except KubeUnavailable as exc:
            raise StoreUnavailable(f"draining node {node}: {exc}") from None
        except KubeError as exc:  # refused by the API (RBAC, a conflict): nothing granted, ask again
            log.error("draining node %s: %s (the server's role needs deploy/rbac.yaml's rules)", node, exc)
            raise StoreUnavailable(f"draining node {node}: the Kubernetes API refused: {exc}") from None
        out = answer.to_dict()
        if paced is None:
            log.info("node %s: no Node object: nothing to drain, the lease is granted", node)
            return json_response(200, out, pool=pool)
        deferred = deferred_answer(self.cluster, drainer, node, pool, paced) if paced.state.active else None
        if deferred is not None:
            return deferred
        out["drain"] = paced.to_dict()
        if paced.unknown:  # nothing cordoned: the node keeps its slot and asks again
            log.warning("node %s: %s", node, paced.unknown)
            out.update(status="waiting", granted=False, retryAfter=paced.wait,
                       reason=f"node {node} is not drained yet: {paced.unknown}; ask again in {paced.wait} s")
            return json_response(429, out, [("Retry-After", str(paced.wait))], pool=pool)
        if paced.skipped:
            log.info("node %s: %s; the lease is granted", node, paced.skipped)
            return json_response(200, out, pool=pool)
        if paced.done:
            log.info("node %s: cordoned and drained (%d pod(s) evicted this round)", node,
                     len(paced.result.evicted) if paced.result else 0)
            return json_response(200, out, pool=pool)
        state = paced.state
        held = state.last_error or "the drain is under way"
        if paced.result is not None:
            where = f"{len(paced.result.still_running)} pod(s) still on it"
        else:
            where = f"attempt {state.attempts} failed; the next in {paced.wait} s (the MCO's cadence)"
        out.update(status="draining", granted=False, retryAfter=paced.wait,
                   reason=f"node {node} is cordoned and draining since {out['drain']['state']['since']}: {where}; "
                          f"{held}" + ("; past the failure threshold: DrainFailed events, mcc_drain_err 1"
                                       if state.failed is not None else ""))
        return json_response(429, out, [("Retry-After", str(paced.wait))], pool=pool)
