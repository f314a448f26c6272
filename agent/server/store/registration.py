"""A node's registration: its credential's record with its approval (docs/security.md
"Identity"), as every node store keeps it (part of ``nodestore``, which still exports its names)."""

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple

from agent.server.rollout.progress import iso8601

SERVED_KEEP = 8  # configs remembered per node as served to it (newest last)
PROVEN_BY = "kubelet"  # the node proved its name with its kubelet's client certificate (identity.PROVEN_BY)
APPROVERS_MANAGED = ("admin", "rule", PROVEN_BY)  # approvals a server that approves gives ("" = pending)
# Approvals a person gave, the cluster's own proof of the name, or ones that predate approval; the
# rest (pending, a rule's, an open server's) count as unvetted (--max-unvetted).
VETTED_BY = ("admin", "upgrade", PROVEN_BY)
# With --backend kubernetes a report is about its Node only under these approvals (issue 45).
BINDS_NODE = ("admin", PROVEN_BY)


@dataclass(frozen=True)
class Registration:
    node: str
    created: float
    approved: float = 0.0  # when it was approved; 0: pending
    by: str = ""  # "admin", "rule" (--auto-approve), "bootstrap"/"open" (a server without an admin token), "upgrade"
    labels: Optional[Dict[str, str]] = None  # labels the admin vouched for (membership uses them)
    served: Tuple[str, ...] = ()  # configs served to the node as itself, newest last
    address: str = ""  # where the registration came from (the client's address as the server decided it)

    @property
    def pending(self) -> bool:
        return not self.approved

    @property
    def binds_node(self) -> bool:
        """Approved by the admin or proven by the node's kubelet certificate: with --backend
        kubernetes only then is a report about the Node of that name."""
        return not self.pending and self.by in BINDS_NODE

    @property
    def managed(self) -> bool:
        """Registered on a server that approves: the approval rules apply."""
        return self.pending or self.by in APPROVERS_MANAGED

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"node": self.node, "state": "Pending" if self.pending else "Approved",
                               "registered": iso8601(self.created)}
        if not self.pending:
            out.update(approved=iso8601(self.approved), approvedBy=self.by)
        if self.labels is not None:
            out["labels"] = dict(self.labels)
        if self.served:
            out["served"] = list(self.served)
        if self.address:
            out["address"] = self.address
        return out


def registration_from(node: str, d: Dict[str, Any]) -> Registration:
    """A Registration from its stored JSON fields (etcd) or row (SQLite, labels/served as JSON text).
    A record without ``approved`` was written before approval existed: it counts as approved."""
    labels, served = d.get("labels"), d.get("served") or ()
    if isinstance(labels, str):
        labels = json.loads(labels) if labels else None
    if isinstance(served, str):
        served = json.loads(served) if served else ()
    approved = d.get("approved")
    if approved is None:
        approved, by = float(d.get("created") or 1.0) or 1.0, "upgrade"
    else:
        by = str(d.get("by") or d.get("approved_by") or "")
    return Registration(node, float(d.get("created") or 0.0), float(approved or 0.0), by,
                        dict(labels) if isinstance(labels, dict) else None, tuple(served), str(d.get("address") or ""))
