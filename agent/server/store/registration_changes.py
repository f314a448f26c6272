"""What the stores that update a registration record by compare-and-swap (etcd, the
Kubernetes API) share: how a record is made, approved and told what was served to its node."""

from typing import Any, Callable, Dict, List, Optional

from agent.server.store.errors import TooManyFromAddress, TooManyPending, TooManyUnvetted
from agent.server.store.nodestore import SERVED_KEEP, VETTED_BY, Registration


class RegistrationChanges:
    """approve and note_served for a store that updates a registration record by
    compare-and-swap (etcd, the Kubernetes API): needs ``registration(node)`` and
    ``_update_registration(node, change)`` (``change(doc)`` returns the new doc, or None for no
    write; False: the node has no record)."""

    registration: Callable[[str], Optional[Registration]]
    _update_registration: Callable[..., bool]
    pending_count: Callable[[], int]
    unvetted_count: Callable[[], int]
    registrations: Callable[..., List[Registration]]

    def _new_record(self, node: str, previous: Optional[Dict[str, Any]], credential_hash: str, now: float,
                    approved: bool, by: str, max_pending: Optional[int],
                    max_unvetted: Optional[int] = None, address: str = "",
                    max_per_address: Optional[int] = None) -> Dict[str, Any]:
        """The record put_credential stores: a new credential keeps the approval of the one it
        replaces; a new name is refused past ``max_pending`` pending ones (TooManyPending), past
        ``max_per_address`` pending ones from ``address`` (TooManyFromAddress) and, unless the
        admin approves it, past ``max_unvetted`` unvetted ones (TooManyUnvetted)."""
        if previous is not None:
            return dict(previous, hash=credential_hash, created=now)
        if not approved and max_pending is not None and self.pending_count() >= max_pending:
            raise TooManyPending(node)
        if not approved and max_per_address is not None and address and \
                self.pending_from(address) >= max_per_address:
            raise TooManyFromAddress(node)
        vetted = approved and by in VETTED_BY
        if not vetted and max_unvetted is not None and self.unvetted_count() >= max_unvetted:
            raise TooManyUnvetted(node)
        doc = {"hash": credential_hash, "created": now, "approved": now if approved else 0,
               "by": by if approved else ""}
        if address:
            doc["address"] = address
        return doc

    def pending_from(self, address: str) -> int:
        """Pending registrations that came from ``address`` (this replica's copy)."""
        return sum(1 for r in self.registrations(True, "", 1 << 30) if r.address == address)

    def approve(self, node: str, now: float, by: str, labels: Optional[Dict[str, str]] = None) -> Optional[Registration]:
        def change(doc: Dict[str, Any]) -> Dict[str, Any]:
            doc = dict(doc, approved=doc.get("approved") or now, by=by)
            if labels is not None:
                doc["labels"] = dict(labels)
            return doc

        return self.registration(node) if self._update_registration(node, change) else None

    def note_served(self, node: str, config: str) -> None:
        reg = self.registration(node)
        if reg is None or config in reg.served:
            return

        def change(doc: Dict[str, Any]) -> Optional[Dict[str, Any]]:
            served = list(doc.get("served") or [])
            if config in served:
                return None
            return dict(doc, served=(served + [config])[-SERVED_KEEP:])

        self._update_registration(node, change)
