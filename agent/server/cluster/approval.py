"""Approval on the service (a mixin of ``service.Cluster``; docs/security.md "Identity").

On a server with an admin token a newly registered name is pending until approved: the service
puts its own mark on every report such a node sends (``nodestore.SERVER_KEY``: pending; who
approved it and the labels the admin vouched for; whether a Done proves its config), and the
store's counters, proofs and membership follow the mark (``nodestore.contribution``,
``progress.membership``). What is served to a node fetching as itself is remembered: its Done
proves only such a config, or one any new node of its pool gets anyway.
"""

import logging
import time
from typing import Any, Dict, Optional

from agent.server.rollout import identity, progress
from agent.server.store.errors import StoreUnavailable
from agent.server.store.nodestore import SERVER_KEY, Registration

log = logging.getLogger(__name__)


class Approval:
    """Needs ``self.store``, ``self.state()``, ``self.pool_of_rendered`` and ``self._step_pool``."""

    def _marked(self, st: Any, node: str, body: Dict[str, Any], reg: Optional[Registration]) -> Dict[str, Any]:
        """The report with the server's own mark (``SERVER_KEY``) on a server that approves nodes:
        pending; who approved it and the labels vouched for; whether a Done proves its config
        (only a config served to the node as itself, or one the pool serves to new nodes)."""
        body = {k: v for k, v in body.items() if k != SERVER_KEY}
        if reg is None or not reg.managed:
            return body
        mark: Dict[str, Any] = {"pending": True} if reg.pending else {"approvedBy": reg.by}
        if reg.labels is not None:
            mark["labels"] = dict(reg.labels)
        body[SERVER_KEY] = mark
        if body.get("state") == "Done" and body.get("currentConfig") is not None and \
                not self._may_prove(st, body, reg):
            mark["proof"] = False
        return body

    def _may_prove(self, st: Any, body: Dict[str, Any], reg: Registration) -> bool:
        config = str(body.get("currentConfig") or "")
        if config in reg.served:
            return True
        # A config any new node of the pool gets now (the current one, or a proven target) was
        # served anonymously at first boot as well: it proves nothing new, and refusing it would
        # keep such nodes from ever counting as updated.
        pool = progress.membership(body, st.pools, self.pool_of_rendered).pool
        row = self.store.pools().get(pool)
        if row is None:
            return False
        if config == row.current:
            return True
        return config == row.target and self.store.proof(pool, row.target).updated > 0

    def approve(self, node: str, labels: Optional[Dict[str, str]] = None) -> Optional[Dict[str, Any]]:
        """Approve a registered node (the admin): its kept report counts from now on (recorded
        again with the new mark, at the time it was received). None: no such registration."""
        reg = self.store.approve(node, time.time(), "admin", labels)
        if reg is None:
            return None
        out: Dict[str, Any] = dict(reg.to_dict(), pool="")
        rec = self.store.node(node)
        if rec is not None:
            st = self.state()
            body = self._marked(st, node, rec.report, reg)
            member = progress.membership(body, st.pools, self.pool_of_rendered)
            self.store.record_report(node, body, member, rec.received)
            for name in sorted({member.pool, rec.pool} - {None, ""}):
                self._step_pool(st, name)
            out["pool"] = member.pool
            out["membership"] = member.why
            if member.degraded:
                out["degradedReason"] = member.degraded
        return out

    def fetch(self, pool_name: str, accept: Optional[str], node: Optional[str] = None):
        """ConfigServing.fetch, for a node on a server that approves: a pending node is answered
        as a new node (it is no member yet), and what is served to a node as itself is
        remembered (its Done proves only such a config: ``_may_prove``)."""
        try:
            reg = self.store.registration(node) if node else None
        except StoreUnavailable:  # not in this replica's copy and etcd away: answer as before approval
            reg = None
        if reg is None or not reg.managed:
            return super().fetch(pool_name, accept, node)
        fetched = super().fetch(pool_name, accept, None if reg.pending else node)
        try:
            self.store.note_served(node, fetched.served.config)  # type: ignore[arg-type]
        except StoreUnavailable as exc:  # the config is served all the same; a Done on it may not prove
            log.warning("could not remember that %s was served to node %s: %s", fetched.served.config, node, exc)
        return fetched

    def register(self, node: str, replace: bool, secret: Optional[str] = None, approved: bool = True,
                 by: str = "", max_pending: Optional[int] = None,
                 max_unvetted: Optional[int] = None) -> Optional[str]:
        """Store ``node``'s credential (``secret``, the node's own, else a new one: returned once;
        only its hash is kept), or None when the node already has one and ``replace`` is False
        (someone registered it meanwhile). A pending registration beyond ``max_pending`` raises
        nodestore.TooManyPending, one no admin approved beyond ``max_unvetted`` TooManyUnvetted."""
        secret = secret or identity.new_credential()
        if not self.store.put_credential(node, identity.credential_hash(secret), time.time(), replace,
                                         approved=approved, by=by, max_pending=max_pending,
                                         max_unvetted=max_unvetted):
            return None
        return secret

