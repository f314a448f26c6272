"""Node credentials and node deletion in the etcd node store (a mixin of ``EtcdNodeStore``).

Keys under the store prefix: ``credentials/<node>`` = JSON ``{"hash", "created", "approved", "by",
"labels", "served"}`` (the SHA-256 of the node's credential, never the secret:
agent/server/rollout/identity.py; its approval: ``approved`` 0 while pending, a record without it
predates approval and counts as approved) and ``credhash/<hash>`` =
the node's name, so a replica that has not yet seen a fresh registration through its watch can
still find the owner of a credential with one read. Each process keeps both directions in memory
(loaded with the nodes, followed by the watch), so checking a credential costs no round trip.
"""

import json
from typing import Any, Callable, Dict, List, Optional

from agent.server.store.etcd import drains
from agent.server.store.etcd.client import KV, cmp_absent, cmp_mod, op_delete, op_put
from agent.server.store.nodestore import (
    VETTED_BY,
    Deleted,
    Registration,
    registration_from,
)
from agent.server.store.registration_changes import RegistrationChanges


class EtcdIdentity(RegistrationChanges):
    """Needs ``self.client``, ``self.prefix``, ``self._k``, ``self._lock``, ``self._index``, ``self._leases``."""

    _credentials: Dict[str, str]  # node -> hash
    _owners: Dict[str, str]  # hash -> node
    _regs: Dict[str, Registration]  # node -> its approval and what was served to it

    def _read_credentials(self, revision: int) -> Dict[str, Dict[str, Any]]:
        """Every node's credential record at ``revision`` (read before taking the lock)."""
        kvs, _ = self.client.range(self._k("credentials/"), prefix=True, revision=revision)
        return {kv.key.decode().rsplit("/", 1)[1]: json.loads(kv.value) for kv in kvs}

    def _set_credentials(self, creds: Dict[str, Dict[str, Any]]) -> None:
        self._credentials = {n: d["hash"] for n, d in creds.items()}
        self._owners = {h: n for n, h in self._credentials.items()}
        self._regs = {n: registration_from(n, d) for n, d in creds.items()}

    def _credential_event(self, node: str, kv: KV, deleted: bool) -> None:
        old = self._credentials.pop(node, None)
        if old is not None:
            self._owners.pop(old, None)
        self._regs.pop(node, None)
        if not deleted:
            doc = json.loads(kv.value)
            digest = doc["hash"]
            self._credentials[node], self._owners[digest] = digest, node
            self._regs[node] = registration_from(node, doc)

    def credential(self, node: str) -> Optional[str]:
        with self._lock:
            digest = self._credentials.get(node)
        if digest is None:  # maybe registered through another replica a moment ago
            kv = self.client.get(self._k("credentials", node))
            digest = json.loads(kv.value)["hash"] if kv else None
        return digest

    def credential_owner(self, credential_hash: str) -> Optional[str]:
        with self._lock:
            node = self._owners.get(credential_hash)
        if node is None:
            kv = self.client.get(self._k("credhash", credential_hash))
            if kv is not None and self.credential(kv.value.decode()) == credential_hash:
                node = kv.value.decode()  # a rotated credential's old hash no longer matches
        return node

    def put_credential(self, node: str, credential_hash: str, now: float, replace: bool, approved: bool = True,
                       by: str = "", max_pending: Optional[int] = None,
                       max_unvetted: Optional[int] = None, address: str = "",
                       max_per_address: Optional[int] = None) -> bool:
        """``max_pending`` and ``max_unvetted`` are checked against this replica's copy of every
        record (followed by the watch): with several replicas registering at once, a few more
        may pass (docs/security.md)."""
        key = self._k("credentials", node)
        for _ in range(20):
            kv = self.client.get(key)
            if kv is not None and not replace:
                return False
            doc = self._new_record(node, json.loads(kv.value) if kv is not None else None, credential_hash, now,
                                   approved, by, max_pending, max_unvetted, address, max_per_address)
            value = json.dumps(doc, sort_keys=True)
            ops = [op_put(key, value), op_put(self._k("credhash", credential_hash), node)]
            if kv is not None:
                ops.append(op_delete(self._k("credhash", json.loads(kv.value)["hash"])))
            guard = [cmp_absent(key)] if kv is None else [cmp_mod(key, kv.mod_revision)]
            ok, revision = self.client.txn(guard, ops)
            if ok:
                with self._lock:
                    self._credential_event(node, KV(key.encode(), value.encode(), revision, revision, 0), False)
                return True
        raise RuntimeError(f"node {node}: too many concurrent registrations in etcd; try again")

    def registration(self, node: str) -> Optional[Registration]:
        with self._lock:
            reg = self._regs.get(node)
        if reg is None:  # maybe registered through another replica a moment ago
            kv = self.client.get(self._k("credentials", node))
            reg = registration_from(node, json.loads(kv.value)) if kv else None
        return reg

    def registrations(self, pending: Optional[bool] = None, after: str = "", limit: int = 500) -> List[Registration]:
        with self._lock:
            names = sorted(n for n, r in self._regs.items() if n > after and (pending is None or r.pending == pending))
            return [self._regs[n] for n in names[:limit]]

    def pending_count(self) -> int:
        with self._lock:
            return sum(1 for r in self._regs.values() if r.pending)

    def unvetted_count(self) -> int:
        with self._lock:
            return sum(1 for r in self._regs.values() if r.pending or r.by not in VETTED_BY)

    def _update_registration(self, node: str, change: Callable[[Dict[str, Any]], Optional[Dict[str, Any]]]) -> bool:
        """Compare-and-swap the node's credential record; ``change`` returns the new doc, or None
        for no write. False: the node has no credential."""
        key = self._k("credentials", node)
        for _ in range(20):
            kv = self.client.get(key)
            if kv is None:
                return False
            doc = change(json.loads(kv.value))
            if doc is None:
                return True
            ok, revision = self.client.txn([cmp_mod(key, kv.mod_revision)], [op_put(key, json.dumps(doc, sort_keys=True))])
            if ok:
                with self._lock:
                    self._credential_event(node, KV(key.encode(), json.dumps(doc).encode(), revision, revision, 0),
                                           False)
                return True
        raise RuntimeError(f"node {node}: too many concurrent updates of its registration in etcd; try again")

    def delete_node(self, node: str, now: float) -> Deleted:
        """One transaction: the report (the index drops its counters and proofs), the lease, the
        credential and the drain log. The lease's etcd lease is revoked after."""
        report = self.client.get(self._k("nodes", node))
        cred = self.client.get(self._k("credentials", node))
        held = [h for h in drains.holders(self.client, self.prefix) if h["node"] == node]
        ops = [op_delete(self._k(*parts)) for parts in (("nodes", node), ("credentials", node), ("drainlog", node))]
        if cred is not None:
            ops.append(op_delete(self._k("credhash", json.loads(cred.value)["hash"])))
        ops += [op_delete(self._k("leases", h["pool"], node)) for h in held]
        _, revision = self.client.txn([], ops)
        for h in held:
            self.client.revoke(h["lease"])
        previous = json.loads(report.value).get("pool") if report is not None else None
        with self._lock:
            self._index.apply(node, None, revision)
            self._leases.pop(node, None)
            digest = self._credentials.pop(node, None)
            if digest is not None:
                self._owners.pop(digest, None)
            self._regs.pop(node, None)
        return Deleted(bool(report or cred or held), previous, held[0]["pool"] if held else None)

