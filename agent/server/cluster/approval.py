"""Approval on the service (a mixin of ``service.Cluster``; docs/security.md "Identity").

On a server with an admin token a newly registered name is pending until approved: the service
puts its own mark on every report such a node sends (``nodestore.SERVER_KEY``: pending; who
approved it and the labels the admin vouched for; whether a Done proves its config), and the
store's counters, proofs and membership follow the mark (``nodestore.contribution``,
``progress.membership``). What is served to a node fetching as itself is remembered, once the
answer went out (``remember_served``: the Secret's write took 64-76 ms of a targeted node's wait
at 1,000 nodes): its Done proves only such a config, one the server targeted to it (its entry in
the pool's row, stored before it was served), or one any new node of its pool gets anyway.
"""

import dataclasses
import logging
import time
from typing import Any, Dict, List, Optional, Tuple

from agent.server.rollout import identity, progress, targeting
from agent.server.store.errors import StoreUnavailable
from agent.server.store.nodestore import SERVER_KEY, Registration

log = logging.getLogger(__name__)

WAITING_LOOKUPS = 200  # pending registrations looked at for a pool's view (--max-pending: 100 by default)


class Approval:
    """Needs ``self.store``, ``self.state()``, ``self.pool_of_rendered``, ``self.wake_pools``,
    ``self.node_truth`` and ``self.report_listeners``."""

    def unbound(self, reg: Optional[Registration]) -> str:
        """Why a node's reports count for nothing ("" when they count): pending; or, with the
        Kubernetes backend (Node objects: ``node_truth``), not approved by the admin nor proven
        by the node's kubelet certificate (issue 45: a report is about a Node only then; a
        --auto-approve rule, an open or older server's approval binds no name to a Node)."""
        if reg is not None and reg.pending:
            return "it waits for approval"
        if self.node_truth is not None and (reg is None or not reg.binds_node):
            how = f"approved by {reg.by}" if reg is not None else "not registered"
            return (f"it is {how}, and with --backend kubernetes a report is about its Node only once the node "
                    f"proved its name with its kubelet's client certificate or the admin approved it")
        return ""

    def waiting_for_approval(self, pool: str, lookups: int = WAITING_LOOKUPS) -> List[str]:
        """The names waiting for approval whose kept report puts them in ``pool`` (sorted; of the
        first ``lookups`` pending registrations: ``--max-pending`` bounds them, 100 by default).
        They count for nothing, so the pool's counts leave them out: its view says how many."""
        out = []
        for reg in self.store.registrations(True, "", lookups):
            rec = self.store.node(reg.node)
            if rec is not None and rec.pool == pool:
                out.append(reg.node)
        return sorted(out)

    def _marked(self, st: Any, node: str, body: Dict[str, Any], reg: Optional[Registration]) -> Dict[str, Any]:
        """The report with the server's own mark (``SERVER_KEY``) on a server that approves nodes:
        pending (also a name that binds no Node: ``unbound``); who approved it and the labels
        vouched for; whether a Done proves its config (only a config served to the node as
        itself, or one the pool serves to new nodes)."""
        body = {k: v for k, v in body.items() if k != SERVER_KEY}
        why = self.unbound(reg)
        if not why and (reg is None or not reg.managed):
            return body
        mark: Dict[str, Any] = {"pending": True} if why else {"approvedBy": reg.by}  # type: ignore[union-attr]
        if why and reg is not None and not reg.pending:
            mark["approvedBy"] = reg.by
        if reg is None:
            return dict(body, **{SERVER_KEY: mark})
        if reg.labels is not None:
            mark["labels"] = dict(reg.labels)
        body[SERVER_KEY] = mark
        if body.get("state") == "Done" and body.get("currentConfig") is not None and \
                not self._may_prove(st, node, body, reg):
            mark["proof"] = False
        return body

    def _may_prove(self, st: Any, node: str, body: Dict[str, Any], reg: Registration) -> bool:
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
        # Ours: the server targeted it to this node, in the row it stored before serving it (only
        # a member fetching as itself is served its entry's config); the note of what was served
        # is written after the answer, so a Done may come before it lands.
        if (targeting.entry_of(row.rollout, node) or {}).get("config") == config:
            return True
        return config == row.target and self.store.proof(pool, row.target).updated > 0

    def approve(self, node: str, labels: Optional[Dict[str, str]] = None, by: str = "admin") -> Optional[Dict[str, Any]]:
        """Approve a registered node (the admin; ``by`` "kubelet": the node proved its name): its
        kept report counts from now on (recorded again with the new mark, at the time it was
        received, and written to its Node with the Kubernetes backend). None: no such registration."""
        reg = self.store.approve(node, time.time(), by, labels)
        if reg is None:
            return None
        out: Dict[str, Any] = dict(reg.to_dict(), pool="")
        rec = self.store.node(node)
        if rec is not None:
            st = self.state()
            body = self._marked(st, node, rec.report, reg)
            member = progress.membership(body, st.pools, self.pool_of_rendered)
            self.store.record_report(node, body, member, rec.received)
            self.wake_pools((member.pool, rec.pool))
            if not (body.get(SERVER_KEY) or {}).get("pending"):
                for listener in self.report_listeners:  # kube_sync: the Node's annotations, labels, MCN
                    listener(node, dict(body, _rewrite=True, _at=rec.received), member.pool)
            out["pool"] = member.pool
            out["membership"] = member.why
            if member.degraded:
                out["degradedReason"] = member.degraded
        return out

    def prove(self, node: str) -> None:
        """A request from ``node`` arrived on a connection whose verified kubelet client
        certificate names it: its registration becomes proven (``approvedBy: kubelet``) unless
        the admin approved it already, and its kept report counts at once."""
        reg = self.store.registration(node)
        if reg is None or reg.binds_node:
            return
        log.info("node %s proved its name with its kubelet's client certificate (it was %s)", node,
                 "pending" if reg.pending else f"approved by {reg.by}")
        self.approve(node, by="kubelet")

    def fetch(self, pool_name: str, accept: Optional[str], node: Optional[str] = None):
        """ConfigServing.fetch, for a node on a server that approves: a pending node is answered
        as a new node (it is no member yet), and what is served to a node as itself is to be
        remembered once answered (``Fetch.note``, for ``remember_served``: its Done proves only
        such a config, or one its targeting named: ``_may_prove``)."""
        try:
            reg = self.store.registration(node) if node else None
        except StoreUnavailable:  # not in this replica's copy and etcd away: answer as before approval
            reg = None
        why = self.unbound(reg) if node else ""
        if not why and (reg is None or not reg.managed):
            return super().fetch(pool_name, accept, node)
        fetched = super().fetch(pool_name, accept, None if why else node)
        if reg is None or fetched.served.config in reg.served:
            return fetched
        return dataclasses.replace(fetched, note=(node, fetched.served.config))

    def remember_served(self, note: Tuple[str, str]) -> None:
        """Note ``(node, config)`` as served (a fetch's ``note``), after its answer went out."""
        node, config = note
        try:
            self.store.note_served(node, config)
        except StoreUnavailable as exc:  # it was served all the same; a Done on it may not prove
            log.warning("could not remember that %s was served to node %s: %s", config, node, exc)

    def register(self, node: str, replace: bool, secret: Optional[str] = None, approved: bool = True,
                 by: str = "", max_pending: Optional[int] = None,
                 max_unvetted: Optional[int] = None, address: str = "",
                 max_per_address: Optional[int] = None) -> Optional[str]:
        """Store ``node``'s credential (``secret``, the node's own, else a new one: returned once;
        only its hash is kept), or None when the node already has one and ``replace`` is False
        (someone registered it meanwhile). A pending registration beyond ``max_pending`` raises
        nodestore.TooManyPending (beyond ``max_per_address`` from ``address``:
        TooManyFromAddress), one no admin approved beyond ``max_unvetted`` TooManyUnvetted."""
        secret = secret or identity.new_credential()
        if not self.store.put_credential(node, identity.credential_hash(secret), time.time(), replace,
                                         approved=approved, by=by, max_pending=max_pending,
                                         max_unvetted=max_unvetted, address=address,
                                         max_per_address=max_per_address):
            return None
        return secret

