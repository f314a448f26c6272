"""The node routes of the HTTP API (a mixin of ``app.App``): read a node, register it, report
as it, hold or give back its drain lease, delete it. Who may: agent/server/rollout/identity.py.

| route | who |
|---|---|
| ``GET /api/v1/nodes``, ``GET /api/v1/nodes/<node>`` | any credential |
| ``POST /api/v1/nodes/<node>/register`` | bootstrap token (a new name) or admin (any name: rotates) |
| ``POST /api/v1/nodes/<node>/report`` | the node itself |
| ``POST /api/v1/nodes/<node>/drain`` | the node itself |
| ``DELETE /api/v1/nodes/<node>/drain`` | the node itself, or the admin (a stuck lease) |
| ``DELETE /api/v1/nodes/<node>`` | admin |
"""

import logging
import urllib.parse
from typing import Any, Dict, List

from agent.server.cluster.nodes import DEFAULT_LIMIT, MAX_LIMIT, node_item, node_list, targets
from agent.server.cluster.service import ReportInvalid, validate_report
from agent.server.http.httpio import HTTPError, Response, allow, json_body, json_response
from agent.server.rollout import drains

log = logging.getLogger(__name__)


class NodeRoutes:
    """Needs ``self.cluster``, ``self.auth``, ``self.caller(environ)`` and ``self._known()``."""

    def node_route(self, environ: Dict[str, Any], method: str, node: str, rest: List[str]) -> Response:
        if not rest:
            allow(method, ("GET", "HEAD", "DELETE"))
            caller = self.caller(environ)
            if method == "DELETE":
                self.auth.require_admin(caller, f"deleting node {node}")
                out = self.cluster.delete_node(node)
                log.info("node %s deleted by the admin (it was %s)", node,
                         f"in pool {out['pool']}" if out["pool"] else "not counted in any pool")
                return json_response(200, out, pool=out["pool"])
            self.auth.require_reader(caller)
            return self.node(node)
        if rest == ["register"]:
            allow(method, ("POST",))
            return self.register(environ, node)
        if rest not in (["report"], ["drain"]):
            raise HTTPError(404, f"no such resource under node {node}: {'/'.join(rest)}; see "
                                 f"/api/v1/nodes/<node>[/register|report|drain]")
        allow(method, ("POST",) if rest == ["report"] else ("POST", "DELETE"))
        caller = self.caller(environ)
        # A node's own credential proves it registered: no second look-up on the hot path.
        registered = caller.node == node or self.cluster.store.credential(node) is not None
        if rest == ["report"]:
            self.auth.require_node(caller, node, registered, f"reporting as node {node}")
            return self.report(node, json_body(environ))
        if method == "DELETE":
            self.auth.require_node(caller, node, registered, f"releasing node {node}'s drain lease", admin_may=True)
            pool = drains.release(self.cluster.store, node)
            return json_response(200, {"node": node, "released": pool is not None, "pool": pool or "",
                                       "actions": ["uncordon"] if pool else []})
        self.auth.require_node(caller, node, registered, f"a drain lease for node {node}")
        return self.drain(node, json_body(environ))

    def register(self, environ: Dict[str, Any], node: str) -> Response:
        """Issue the node its credential, once (as a bootstrap CSR gets one client certificate);
        the admin may issue a new one (the old one stops working at once)."""
        caller = self.caller(environ)
        registered = self.cluster.store.credential(node) is not None
        self.auth.may_register(caller, node, registered)
        secret = self.cluster.register(node, replace=registered)
        if secret is None:  # registered by someone else between our check and our write
            self.auth.may_register(caller, node, True)
            secret = self.cluster.register(node, replace=True)
        log.info("node %s %s (by %s)", node, "credential rotated" if registered else "registered", caller.describe())
        body = {"node": node, "credential": secret, "rotated": registered,
                "use": "Authorization: Bearer <credential> on this node's reports, drain requests and config "
                       "fetches; it is shown only now"}
        return json_response(200 if registered else 201, body, [("Cache-Control", "no-store")])

    def node(self, node: str) -> Response:
        rec = self.cluster.store.node(node)
        if rec is None:
            raise HTTPError(404, f"node {node!r} has not reported")
        item = node_item(rec, targets(self.cluster.pool_views(only=rec.pool, pending=False, nodes=0)))
        return json_response(200, {"node": node, "name": node, "report": rec.report, "pool": rec.pool,
                                   "membership": rec.why, "degradedReason": rec.degraded,
                                   "updated": item["updated"], "reportedAt": item["reportedAt"],
                                   "drainEvents": self.cluster.store.drain_events(node)})

    def nodes(self, environ: Dict[str, Any]) -> Response:
        qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        try:
            limit = int((qs.get("limit") or [str(DEFAULT_LIMIT)])[0])
        except ValueError:
            limit = 0
        if not 0 < limit <= MAX_LIMIT:
            raise HTTPError(400, f"limit must be a number from 1 to {MAX_LIMIT}", field="limit")
        after = (qs.get("continue") or [""])[0]
        records = self.cluster.store.nodes(after=after, limit=limit)
        return json_response(200, node_list(records, targets(self.cluster.pool_views(pending=False, nodes=0)), limit))

    def report(self, node: str, body: Any) -> Response:
        try:
            report = validate_report(body)
        except ReportInvalid as exc:
            raise HTTPError(400, f"invalid report: {exc}", field=exc.field)
        out = self.cluster.record_report(node, report)
        return json_response(200, out, pool=out["pool"])

    def drain(self, node: str, body: Any) -> Response:
        if not isinstance(body, dict):
            raise HTTPError(400, "the body must be a JSON object {\"pool\": ..., \"config\": ...}", field="$")
        pool = body.get("pool")
        if not isinstance(pool, str) or not pool:
            raise HTTPError(400, "pool: required", field="$.pool")
        config = body.get("config", "")
        if not isinstance(config, str):
            raise HTTPError(400, "config: must be a string", field="$.config")
        cluster = self.cluster
        if pool not in cluster.state().pools:
            raise HTTPError(404, f"unknown pool {pool!r}; known pools: {self._known()}", field="$.pool")
        member = cluster.node_pool(node)
        if member is not None and member.pool != pool:
            raise HTTPError(409, f"node {node} belongs to pool {member.pool} ({member.why}), not {pool}",
                            field="$.pool")
        answer = drains.request_drain(cluster.store, node, pool, config, cluster.drain_limit(pool), cluster.lease_ttl)
        if answer.granted:
            return json_response(200, answer.to_dict(), pool=pool)
        return json_response(429, answer.to_dict(), [("Retry-After", str(answer.retry_after))], pool=pool)
