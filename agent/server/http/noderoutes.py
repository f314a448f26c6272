"""The node routes of the HTTP API (a mixin of ``app.App``): read a node, register it, report
as it, hold or give back its drain lease, delete it. Who may: agent/server/rollout/identity.py.

| route | who |
|---|---|
| ``GET /api/v1/nodes``, ``GET /api/v1/nodes/<node>`` | any credential |
| ``GET /api/v1/nodes?approval=pending`` | any credential: registrations (pending, approved or all) |
| ``POST /api/v1/nodes/<node>/register`` | bootstrap token (a new name; again with the same credential: idempotent) or admin (any name: rotates) |
| ``GET /api/v1/nodes/<node>/registration`` | any credential |
| ``POST /api/v1/nodes/<node>/approve`` | admin |
| ``POST /api/v1/nodes/<node>/report`` | the node itself |
| ``POST /api/v1/nodes/<node>/drain`` | the node itself |
| ``DELETE /api/v1/nodes/<node>/drain`` | the node itself, or the admin (a stuck lease) |
| ``DELETE /api/v1/nodes/<node>`` | admin |
"""

import logging
import urllib.parse
from typing import Any, Dict, List, Optional

from agent.server.cluster import registrations
from agent.server.cluster.nodes import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    merged_page,
    node_item,
    node_list,
    rfc3339,
    targets,
    unmanaged_item,
    with_readiness,
)
from agent.server.cluster.service import ReportInvalid, validate_report
from agent.server.http.drainroutes import DrainRoutes, released_answer
from agent.server.http.httpio import HTTPError, Response, allow, client_address, json_body, json_response
from agent.server.rollout import drains, identity
from agent.server.rollout.identity import Denied
from agent.server.store.errors import TooManyFromAddress, TooManyPending, TooManyUnvetted

log = logging.getLogger(__name__)




class NodeRoutes(DrainRoutes):
    """Needs ``self.cluster``, ``self.auth``, ``self.caller(environ)`` and ``self._known()``."""

    def node_route(self, environ: Dict[str, Any], method: str, node: str, rest: List[str]) -> Response:
        if not rest:
            allow(method, ("GET", "HEAD", "DELETE"))
            caller = self.caller(environ)
            if method == "DELETE":
                self.auth.require_admin(caller, f"deleting node {node}")
                out = self.cluster.delete_node(node)
                if out["deleted"]:
                    log.info("node %s deleted by the admin (it was %s)", node,
                             f"in pool {out['pool']}" if out["pool"] else "not counted in any pool")
                else:
                    log.info("node %s: the admin asked to delete it; nothing to delete (no report, drain lease "
                             "or credential)", node)
                return json_response(200, out, pool=out["pool"])
            self.auth.require_reader(caller)
            return self.node(node)
        if rest == ["register"]:
            allow(method, ("POST",))
            return self.register(environ, node)
        if rest == ["approve"]:
            allow(method, ("POST",))
            return self.approve(environ, node)
        if rest == ["registration"]:
            allow(method, ("GET", "HEAD"))
            self.auth.require_reader(self.caller(environ))
            reg = self.cluster.store.registration(node)
            if reg is None:
                raise HTTPError(404, f"node {node!r} is not registered")
            return json_response(200, registrations.item(self.cluster, reg))
        if rest not in (["report"], ["drain"]):
            raise HTTPError(404, f"no such resource under node {node}: {'/'.join(rest)}; see "
                                 f"/api/v1/nodes/<node>[/register|report|drain]")
        allow(method, ("POST",) if rest == ["report"] else ("POST", "DELETE"))
        caller = self.caller(environ)
        # A node's own credential proves it registered: no second look-up on the hot path.
        registered = caller.node == node or self.cluster.store.credential(node) is not None
        if rest == ["report"]:
            self.auth.require_node(caller, node, registered, f"reporting as node {node}")
            if not registered and self.cluster.node_truth is not None:  # an open server's unregistered name
                raise Denied(403, f"reporting as node {node}: with --backend kubernetes a report is kept only for a "
                                  f"registered name (it counts once proven or approved): {identity.register_hint(node)}")
            return self.report(node, json_body(environ))
        if method == "DELETE":
            self.auth.require_node(caller, node, registered, f"releasing node {node}'s drain lease", admin_may=True)
            pool = drains.release(self.cluster.store, node)
            return json_response(200, released_answer(node, pool, self.cluster.drainer is not None))
        self.auth.require_node(caller, node, registered, f"a drain lease for node {node}")
        why = self.cluster.unbound(self.cluster.store.registration(node))
        if why and (caller.kind == identity.NODE or self.cluster.node_truth is not None):
            raise Denied(403, f"a drain lease for node {node}: node {node} counts for nothing: {why}; "
                              f"{self._approve_hint(node)}")
        return self.drain(node, json_body(environ))

    def _approve_hint(self, node: str) -> str:
        hint = identity.approve_hint(node, bool(self.auth.admin))
        if self.auth.kubelet_proof:
            hint += (" (or the node proves its name: node-agent presents its kubelet's client certificate as soon as "
                     "the kubelet has one)")
        return hint

    @staticmethod
    def _offered_credential(environ: Dict[str, Any]) -> Optional[str]:
        """The credential a node made itself and sends with its registration (``{"credential"}``),
        or None (no body, or none in it: the server makes one)."""
        length = (environ.get("CONTENT_LENGTH") or "").strip()
        if length in ("", "0") and "chunked" not in (environ.get("HTTP_TRANSFER_ENCODING") or "").lower():
            return None
        body = json_body(environ)
        if body is None or body == {}:
            return None
        if not isinstance(body, dict) or set(body) - {"credential"}:
            raise HTTPError(400, "the body must be {\"credential\": \"nac1_...\"} (the node's own credential) or "
                                 "empty (the server makes one)", field="$")
        secret = body.get("credential")
        if not identity.valid_credential(secret):
            raise HTTPError(400, f"credential: must be {identity.CREDENTIAL_PREFIX} followed by at least "
                                 f"{identity.MIN_CREDENTIAL_CHARS} URL-safe base64 characters (256 random bits)",
                            field="$.credential")
        return secret

    def register(self, environ: Dict[str, Any], node: str) -> Response:
        """Store the node's credential, once (as a bootstrap CSR gets one client certificate):
        the one the node made and sends (``{"credential"}``: registering again with it is
        idempotent, so a node cut off before it kept the answer completes on its next run), else
        a new one shown only now. The admin may register a node again (the old credential stops
        working at once). On a server that approves, a new name waits for approval."""
        caller = self.caller(environ, prove=False)
        caller.check_acting_for(node)  # a kubelet certificate for another node: 403 naming both
        proven = caller.kubelet == node and caller.kind != identity.NODE
        offered = self._offered_credential(environ)
        store = self.cluster.store
        stored = store.credential(node)
        if offered is not None and stored is not None and identity.same_secret(stored, identity.credential_hash(offered)):
            if caller.anonymous and self.auth.enabled and not proven:
                self.auth.may_register(caller, node, False)  # 401: the bootstrap token is needed
            if proven:
                self.cluster.prove(node)
            reg = store.registration(node)
            log.info("node %s registered again with the credential it holds (by %s)", node, caller.describe())
            return self._registered(node, None, False, reg, 200)
        registered = stored is not None
        if proven and registered and caller.kind != identity.ADMIN:
            registered = self._replace_unproven(node)
        if not proven:
            self.auth.may_register(caller, node, registered)
        if offered is not None and store.credential_owner(identity.credential_hash(offered)) is not None:
            raise HTTPError(409, "credential: another node holds this credential; make a new one", field="$.credential")
        if not proven:  # the cluster's own proof of the name is never held back by a cap or the rate limit
            self.auth.throttle(caller, node)
        approved, by = self.auth.approval_of(caller, node)
        admission = self.auth.admission
        caps = {} if proven or approved and by == "admin" else dict(
            max_pending=admission.max_pending, max_unvetted=admission.max_unvetted,
            max_per_address=admission.max_per_address)
        address = client_address(environ, self.forwarded_allow)
        try:
            secret = self.cluster.register(node, replace=registered, secret=offered, approved=approved, by=by,
                                           address=address, **caps)
            if secret is None:  # registered by someone else between our check and our write
                self.auth.may_register(caller, node, True)
                secret = self.cluster.register(node, replace=True, secret=offered)
        except TooManyPending as exc:
            raise self._over_cap(node, exc, address)
        reg = store.registration(node)
        log.info("node %s %s (by %s)%s", node, "credential rotated" if registered else "registered",
                 caller.describe(), "; it waits for approval" if reg is not None and reg.pending else "")
        return self._registered(node, None if offered else secret, registered, reg, 200 if registered else 201)

    def _replace_unproven(self, node: str) -> bool:
        """A node registering with a kubelet certificate for its own name, under which another
        credential is registered: that one is a squatter's unless the admin approved it or a
        kubelet certificate proved it. A squatter's registration goes with everything it wrote
        (as the admin's delete); the proven node then registers afresh. False: nothing is left
        registered under the name."""
        reg = self.cluster.store.registration(node)
        if reg is not None and reg.binds_node:
            how = "approved by the admin" if reg.by == "admin" else "proven by its kubelet's certificate"
            raise Denied(403, f"node {node} is already registered, {how}, with another credential: only the admin "
                              f"may register it again (POST with the admin token) or delete it first "
                              f"(DELETE /api/v1/nodes/{node})")
        log.warning("node %s: its kubelet's certificate proves the name, which %s registered with another "
                    "credential: that registration and what it recorded are removed", node,
                    f"a registration {'pending' if reg is None or reg.pending else 'approved by ' + reg.by}")
        self.cluster.delete_node(node)
        return False

    def _over_cap(self, node: str, exc: Exception, address: str = "") -> Denied:
        """429 naming the cap a new name hit (counted in the store: every replica's registrations)."""
        admission, admin = self.auth.admission, bool(self.auth.admin)
        if isinstance(exc, TooManyFromAddress):
            what = (f"{admission.max_per_address} registration(s) from {address} already wait for approval (serve "
                    f"--max-pending-per-address, counted in the store)")
            fix = ("the admin approves or deletes some of them" if admin else
                   "restart serve with --admin-token-file to approve or delete some") + (
                   ", or the nodes prove their names with their kubelets' certificates" if self.auth.kubelet_proof
                   else "")
            return Denied(429, f"{what}: node {node} cannot register until {fix}", [("Retry-After", "60")])
        if isinstance(exc, TooManyUnvetted):
            what = (f"{admission.max_unvetted} registered name(s) were never approved by the admin (serve "
                    f"--max-unvetted, the total of pending and rule-approved names in the store, shared by every "
                    f"replica)")
            fix = ("the admin approves (node-config-server approve node NAME) or deletes some" if admin else
                   "give serve --admin-token-file to approve or delete some, or raise --max-unvetted")
        else:
            what = (f"{admission.max_pending} registration(s) already wait for approval (serve --max-pending, "
                    f"counted in the store, shared by every replica)")
            fix = ("the admin approves or deletes some (GET /api/v1/nodes?approval=pending; node-config-server "
                   "approve node NAME)" if admin else
                   "restart serve with --admin-token-file to approve or delete some, or with --auto-approve REGEX")
        return Denied(429, f"{what}: node {node} cannot register until {fix}", [("Retry-After", "60")])

    def _registered(self, node: str, secret: Optional[str], rotated: bool, reg: Any, code: int) -> Response:
        body: Dict[str, Any] = {"node": node, "rotated": rotated,
                                "approval": "Pending" if reg is not None and reg.pending else "Approved"}
        if secret is not None:
            body["credential"] = secret
            body["use"] = ("Authorization: Bearer <credential> on this node's reports, drain requests and config "
                           "fetches; it is shown only now")
        why = self.cluster.unbound(reg) if reg is not None else ""
        if why:
            body["approval"] = "Pending"
            body["note"] = (f"node {node} counts for nothing until approved or proven ({why}); its reports are kept "
                            f"meanwhile: {self._approve_hint(node)}")
        elif reg is not None:
            body["approvedBy"] = reg.by
        return json_response(code, body, [("Cache-Control", "no-store")])

    def approve(self, environ: Dict[str, Any], node: str) -> Response:
        """The admin approves a registered node (again: ``{"labels"}`` replaces the labels it
        vouches for, which then decide the node's pool instead of the reported ones)."""
        caller = self.caller(environ)
        self.auth.require_admin(caller, f"approving node {node}")
        labels = None
        length = (environ.get("CONTENT_LENGTH") or "").strip()
        if length not in ("", "0"):
            body = json_body(environ)
            if not isinstance(body, dict) or set(body) - {"labels"}:
                raise HTTPError(400, "the body must be {\"labels\": {name: value}} or empty", field="$")
            labels = body.get("labels")
            if labels is not None and (not isinstance(labels, dict) or not all(
                    isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
                raise HTTPError(400, "labels: must be a map of label name to string value", field="$.labels")
        out = self.cluster.approve(node, labels)
        if out is None:
            raise HTTPError(404, f"node {node!r} is not registered: nothing to approve (it registers with the "
                                 f"bootstrap token first)")
        log.info("node %s approved by the admin%s", node, f" with labels {labels}" if labels is not None else "")
        return json_response(200, out, pool=out.get("pool") or "")

    def node(self, node: str) -> Response:
        rec = self.cluster.store.node(node)
        if rec is None:
            return self._unreported_node(node)
        item = node_item(rec, targets(self.cluster.pool_views(only=rec.pool, pending=False, nodes=0)),
                         self.cluster.store.pools(), self.cluster.first_boot_view(rec, stages=True))
        out = {"node": node, "name": node, "report": item["report"], "pool": rec.pool,
               "membership": rec.why, "degradedReason": rec.degraded,
               "updated": item["updated"], "reportedAt": item["reportedAt"],
               **({"approval": item["approval"]} if "approval" in item else {}),
               **({"rollout": item["rollout"]} if "rollout" in item else {}),
               "drainEvents": [dict(e, at=rfc3339(e.get("at"))) for e in self.cluster.store.drain_events(node)],
               **({"firstBoot": item["firstBoot"]} if "firstBoot" in item else {})}
        truth = self.cluster.node_truth
        if truth is not None and truth.ready():  # the Kubernetes backend: the Node's labels decide (kube_nodes.py)
            out.update(truth.describe(node, self.cluster.state().pools))
        with_readiness(truth, [out])
        if self.cluster.drainer is not None:  # the Kubernetes backend: a drain under way, from the Node
            from agent.server.cluster.drainpacer import node_drain

            drain = node_drain(self.cluster.drainer, node)
            if drain:
                out["drain"] = drain
        return json_response(200, out)

    def _unreported_node(self, node: str) -> Response:
        """A Node node-agent has not reported for (``--backend kubernetes``), as its list item; 404
        for a name that is neither a Node nor in the store."""
        truth = self.cluster.node_truth
        found = truth.unreported_one(node, self.cluster.state().pools) if truth is not None and truth.ready() else None
        if found is None:
            raise HTTPError(404, f"node {node!r} has not reported")
        out = unmanaged_item(found, targets(self.cluster.pool_views(pending=False, nodes=0)))
        out.update(node=node, drainEvents=[], degradedReason="")
        with_readiness(truth, [out])
        return json_response(200, out)

    def nodes(self, environ: Dict[str, Any]) -> Response:
        qs = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
        try:
            limit = int((qs.get("limit") or [str(DEFAULT_LIMIT)])[0])
        except ValueError:
            limit = 0
        if not 0 < limit <= MAX_LIMIT:
            raise HTTPError(400, f"limit must be a number from 1 to {MAX_LIMIT}", field="limit")
        after = (qs.get("continue") or [""])[0]
        approval = (qs.get("approval") or [""])[0]
        if approval:
            if approval not in ("pending", "approved", "all"):
                raise HTTPError(400, "approval must be pending, approved or all", field="approval")
            return json_response(200, registrations.listing(self.cluster, approval, after, limit))
        records = self.cluster.store.nodes(after=after, limit=limit)
        deadlines = self.cluster.first_boot_deadlines()  # each node's first boot, decided now
        pool_targets = targets(self.cluster.pool_views(pending=False, nodes=0))
        out = node_list(records, pool_targets, limit, self.cluster.store.pools(),
                        lambda rec: self.cluster.first_boot_view(rec, deadlines=deadlines))
        truth = self.cluster.node_truth
        if truth is not None and truth.ready():  # every Node, as oc get nodes: those with no report too
            found = truth.unreported(self.cluster.state().pools, after, [r.node for r in records], len(records) == limit)
            if found:
                out["items"] = merged_page(out["items"], [unmanaged_item(n, pool_targets) for n in found], limit)
                out["metadata"] = {"continue": out["items"][-1]["name"]} if len(out["items"]) == limit else {}
        with_readiness(truth, out["items"])  # READY, from the Node objects
        return json_response(200, out)

    def report(self, node: str, body: Any) -> Response:
        try:
            report = validate_report(body)
        except ReportInvalid as exc:
            raise HTTPError(400, f"invalid report: {exc}", field=exc.field)
        out = self.cluster.record_report(node, report)
        if out.get("approval") == "Pending":
            out["note"] = f"{out['note']}; {self._approve_hint(node)}"
        return json_response(200, out, pool=out["pool"])
