"""Node credentials as Secrets in the server's namespace: the Kubernetes node store's identity
part (composed by ``kube.nodestore.KubeNodeStore``; the etcd version is ``etcd.identity``).

One Secret per node, type ``node-agent.openshift.io/credential``, named
``node-credential-<node>`` (or ``node-credential-<sha256(node)[:40]>`` when that is longer than a
name may be), the node in the annotation ``node-agent.openshift.io/node``. ``data.record`` is the
JSON record etcd keeps (``hash``, ``created``, ``approved``, ``by``, ``labels``, ``served``,
``address``): the SHA-256 of the node's credential, never the credential; and, while the node's
reports count for nothing (pending, or with --backend kubernetes neither proven by its kubelet's
certificate nor approved by the admin), its newest report (``pendingReport``): such a report is
never written to a MachineConfigNode or a Node (issue 45). The label
``node-agent.openshift.io/credential-hash`` (the hash's first 63 hex digits: a label value's
limit) finds a credential's owner with one list when this replica has not seen it yet.

Every replica follows the Secrets with one watch and answers from memory; a write is a
compare-and-swap on the Secret's resourceVersion (create: 409 AlreadyExists when another replica
registered the node first; update: 409 Conflict when it changed since read).
"""

import base64
import hashlib
import json
import re
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.store.kube.client import SECRETS, KubeClient, KubeError
from agent.server.store.kube.mcnrecord import node_record
from agent.server.store.kube.watch import Follower, NewestObjects, permission
from agent.server.store.nodestore import VETTED_BY, NodeRecord, Registration, registration_from
from agent.server.store.registration_changes import RegistrationChanges

SECRET_TYPE = "node-agent.openshift.io/credential"
PENDING_REPORT = "pendingReport"  # the record's field holding a report that counts for nothing (issue 45)
NODE_ANNOTATION = "node-agent.openshift.io/node"
APP_LABEL, APP = "app.kubernetes.io/name", "node-config-server"
KIND_LABEL, KIND = "node-agent.openshift.io/kind", "credential"
HASH_LABEL = "node-agent.openshift.io/credential-hash"
NAME_PREFIX = "node-credential-"
MAX_NAME = 253  # a Secret's name is a DNS subdomain
MAX_TRIES = 20  # compare-and-swap rounds lost to other replicas before giving up
SHA256_HEX = re.compile(r"[0-9a-f]{64}")
# An owner lookup that misses memory lists by label, and the API server reads every Secret of
# the namespace from etcd to filter them: a stream of made-up credentials (no authentication
# needed to send one) would cost O(nodes) each. So misses are rationed per process; past the
# ration an unknown credential is unknown (401) until the watch brings it, within moments.
LOOKUPS_PER_SECOND = 10.0
LOOKUP_BURST = 20

Doc = Dict[str, Any]


def secret_name(node: str) -> str:
    name = NAME_PREFIX + node
    return name if len(name) <= MAX_NAME else NAME_PREFIX + hashlib.sha256(node.encode()).hexdigest()[:40]


def hash_label(digest: str) -> str:
    """A label value for ``digest``: its first 63 hex digits (a value's limit); any other form of
    hash (tests use short strings) is hashed first, so the value is always valid."""
    if not SHA256_HEX.fullmatch(digest):
        digest = hashlib.sha256(digest.encode()).hexdigest()
    return digest[:63]


def secret_for(node: str, namespace: str, doc: Doc, version: str = "") -> Dict[str, Any]:
    meta: Dict[str, Any] = {
        "name": secret_name(node), "namespace": namespace, "annotations": {NODE_ANNOTATION: node},
        "labels": {APP_LABEL: APP, KIND_LABEL: KIND, HASH_LABEL: hash_label(doc["hash"])}}
    if version:
        meta["resourceVersion"] = version
    record = base64.b64encode(json.dumps(doc, sort_keys=True).encode()).decode()
    return {"apiVersion": "v1", "kind": "Secret", "metadata": meta, "type": SECRET_TYPE, "data": {"record": record}}


def record_of(obj: Optional[Dict[str, Any]]) -> Optional[Tuple[str, Doc]]:
    """(node, record) of one of our Secrets; None for anything else or an unreadable record
    (somebody edited it: the node registers again, as with no record)."""
    if not obj or obj.get("type") != SECRET_TYPE:
        return None
    node = ((obj.get("metadata") or {}).get("annotations") or {}).get(NODE_ANNOTATION)
    try:
        doc = json.loads(base64.b64decode((obj.get("data") or {}).get("record") or ""))
    except ValueError:
        return None
    if not node or not isinstance(doc, dict) or not isinstance(doc.get("hash"), str):
        return None
    return node, doc


class KeptFirstBoots:
    """``open_first_boots`` of the Kubernetes node store (a mixin before ``IndexedReads``): the
    MachineConfigNodes' (the index), and the reports kept in registrations while they count for
    nothing (issue 45: never on an MCN, yet a first boot that failed or stalled is shown, and
    counted in its pool's first boots, whatever its approval: issue 47). Needs ``self.credentials``
    and ``self.node`` (a name's MCN record first, else its kept report)."""

    credentials: "KubeCredentials"
    node: Callable[[str], Optional[NodeRecord]]

    def open_first_boots(self, pool: Optional[str] = None) -> List[NodeRecord]:
        from agent.server.rollout.firstboots import is_open

        kept = [r for r in self.credentials.pending_reports().values()
                if (pool is None or r.pool == pool) and is_open(r.report) and self.node(r.node) is r]
        return sorted(super().open_first_boots(pool) + kept, key=lambda r: r.node)  # type: ignore[misc]


class CredentialMethods:
    """The NodeStore identity methods of the Kubernetes node store (a mixin), each handed to its
    ``self.credentials`` (a KubeCredentials)."""

    credentials: "KubeCredentials"

    def credential(self, node: str) -> Optional[str]:
        return self.credentials.credential(node)

    def credential_owner(self, credential_hash: str) -> Optional[str]:
        return self.credentials.credential_owner(credential_hash)

    def put_credential(self, node: str, credential_hash: str, now: float, replace: bool, approved: bool = True,
                       by: str = "", max_pending: Optional[int] = None,
                       max_unvetted: Optional[int] = None, address: str = "",
                       max_per_address: Optional[int] = None) -> bool:
        return self.credentials.put_credential(node, credential_hash, now, replace, approved, by, max_pending,
                                               max_unvetted, address, max_per_address)

    def registration(self, node: str) -> Optional[Registration]:
        return self.credentials.registration(node)

    def registrations(self, pending: Optional[bool] = None, after: str = "", limit: int = 500) -> List[Registration]:
        return self.credentials.registrations(pending, after, limit)

    def pending_count(self) -> int:
        return self.credentials.pending_count()

    def unvetted_count(self) -> int:
        return self.credentials.unvetted_count()

    def approve(self, node: str, now: float, by: str, labels: Optional[Dict[str, str]] = None) -> Optional[Registration]:
        return self.credentials.approve(node, now, by, labels)

    def note_served(self, node: str, config: str) -> None:
        self.credentials.note_served(node, config)


class KubeCredentials(Follower, RegistrationChanges):
    """The NodeStore identity methods, on Secrets in ``namespace``. With ``watch`` (a server) the
    Secrets are followed and read from memory; without (one-shot tools, tests), listings read
    the API each time."""

    def __init__(self, client: KubeClient, namespace: str, watch: bool = True):
        self.client = client
        self.namespace = namespace
        self._lock = threading.Lock()
        self._secrets = NewestObjects()
        self._credentials: Dict[str, str] = {}  # node -> hash
        self._owners: Dict[str, str] = {}  # hash -> node
        self._regs: Dict[str, Registration] = {}
        self._reports: Dict[str, NodeRecord] = {}  # node -> the report kept while it counts for nothing
        self.lookup_rate, self.lookup_burst = LOOKUPS_PER_SECOND, LOOKUP_BURST
        self._lookups = (float(LOOKUP_BURST), time.monotonic())  # (tokens, when counted)
        self._follow(client, SECRETS, namespace, f"{KIND_LABEL}={KIND}", watch)

    # -- the in-memory index, fed by the watch and by this process's writes ------------------

    def _event(self, kind: str, obj: Dict[str, Any]) -> None:
        with self._lock:
            if kind == "RELIST":
                self._secrets.resync([_slim(o) for o in obj["items"]], obj["metadata"]["resourceVersion"])
                self._reindex()
            else:
                self._index(self._secrets.event(kind, _slim(obj)))

    def _note(self, obj: Dict[str, Any], deleted: bool = False) -> None:
        with self._lock:
            self._index(self._secrets.put(_slim(obj), deleted))

    def _index(self, change: Optional[Tuple[Optional[Dict[str, Any]], Optional[Dict[str, Any]]]]) -> None:
        if change is None:
            return
        before, after = record_of(change[0]), record_of(change[1])
        if before is not None:
            node = before[0]
            old = self._credentials.pop(node, None)
            if old is not None and self._owners.get(old) == node:
                del self._owners[old]  # a rotated credential's old hash no longer owns the node
            self._regs.pop(node, None)
            self._reports.pop(node, None)
        if after is not None:
            node, doc = after
            self._credentials[node], self._owners[doc["hash"]] = doc["hash"], node
            self._regs[node] = registration_from(node, doc)
            self._keep_pending(node, doc)

    def _keep_pending(self, node: str, doc: Doc) -> None:
        rec = node_record(node, doc.get(PENDING_REPORT)) if doc.get(PENDING_REPORT) else None
        if rec is not None:
            self._reports[node] = rec
        else:
            self._reports.pop(node, None)

    def _reindex(self) -> None:
        records = [r for r in map(record_of, self._secrets.objects.values()) if r is not None]
        self._credentials = {n: d["hash"] for n, d in records}
        self._owners = {d["hash"]: n for n, d in records}
        self._regs = {n: registration_from(n, d) for n, d in records}
        self._reports = {}
        for node, doc in records:
            self._keep_pending(node, doc)

    # -- reports that count for nothing (issue 45) ------------------------------------------------

    def pending_report(self, node: str) -> Optional[NodeRecord]:
        """The report ``node`` sent while it counted for nothing (pending, or not proven with
        --backend kubernetes), kept in its registration record: never on its MachineConfigNode
        or Node."""
        with self._lock:
            return self._reports.get(node)

    def pending_reports(self) -> Dict[str, NodeRecord]:
        with self._lock:
            return dict(self._reports)

    def keep_report(self, node: str, value: Optional[str]) -> bool:
        """Keep ``value`` (mcnrecord.report_annotation's JSON; None: drop it) as the node's
        pending report, in its Secret's record (compare-and-swap). False: the node has no
        registration (deleted meanwhile)."""
        def change(doc: Doc) -> Optional[Doc]:
            if doc.get(PENDING_REPORT) == value:
                return None
            doc = dict(doc)
            if value is None:
                doc.pop(PENDING_REPORT, None)
            else:
                doc[PENDING_REPORT] = value
            return doc

        return self._update_registration(node, change)

    def _refresh(self) -> None:
        """Without a watch, listings read the API (one list)."""
        if self.reflector is None:
            with permission("list", SECRETS, self.namespace):
                items, version = self.client.list(SECRETS.path(namespace=self.namespace),
                                                  {"labelSelector": f"{KIND_LABEL}={KIND}"})
            self._event("RELIST", {"items": items, "metadata": {"resourceVersion": version}})

    # -- API calls --------------------------------------------------------------------------

    def _read(self, node: str) -> Optional[Dict[str, Any]]:
        """The node's Secret from the API (None: none), noted in memory."""
        try:
            with permission("get", SECRETS, self.namespace):
                obj = self.client.get(SECRETS.path(secret_name(node), self.namespace))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        rec = record_of(obj)
        if rec is None or rec[0] != node:
            return None
        self._note(obj)
        return obj

    def _write(self, node: str, doc: Doc, version: str) -> bool:
        """Create (no ``version``) or compare-and-swap update; False: another replica was first."""
        body = secret_for(node, self.namespace, doc, version)
        try:
            if version:
                with permission("update", SECRETS, self.namespace):
                    obj = self.client.replace(SECRETS.path(body["metadata"]["name"], self.namespace), body)
            else:
                with permission("create", SECRETS, self.namespace):
                    obj = self.client.create(SECRETS.path(namespace=self.namespace), body)
        except KubeError as exc:
            if exc.status in (404, 409):  # 409: written meanwhile; 404: deleted meanwhile
                return False
            raise
        self._note(obj)
        return True

    # -- the NodeStore identity methods ------------------------------------------------------

    def credential(self, node: str) -> Optional[str]:
        with self._lock:
            digest = self._credentials.get(node)
        if digest is None:  # maybe registered through another replica a moment ago
            rec = record_of(self._read(node))
            digest = rec[1]["hash"] if rec else None
        return digest

    def credential_owner(self, credential_hash: str) -> Optional[str]:
        with self._lock:
            node = self._owners.get(credential_hash)
        if node is not None or not self._may_look_up():
            return node
        selector = f"{KIND_LABEL}={KIND},{HASH_LABEL}={hash_label(credential_hash)}"
        with permission("list", SECRETS, self.namespace):
            items, _ = self.client.list(SECRETS.path(namespace=self.namespace), {"labelSelector": selector})
        for obj in items:
            rec = record_of(obj)
            if rec is not None and rec[1]["hash"] == credential_hash:  # the label is only 63 of 64 digits
                self._note(obj)
                return rec[0]
        return None

    def _may_look_up(self) -> bool:
        """A token bucket: ``lookup_rate`` a second, ``lookup_burst`` at once."""
        with self._lock:
            tokens, then = self._lookups
            now = time.monotonic()
            tokens = min(float(self.lookup_burst), tokens + (now - then) * self.lookup_rate)
            self._lookups = (tokens - 1, now) if tokens >= 1 else (tokens, now)
            return tokens >= 1

    def put_credential(self, node: str, credential_hash: str, now: float, replace: bool, approved: bool = True,
                       by: str = "", max_pending: Optional[int] = None,
                       max_unvetted: Optional[int] = None, address: str = "",
                       max_per_address: Optional[int] = None) -> bool:
        """``max_pending`` and ``max_unvetted`` are checked against this replica's copy of every
        record (followed by the watch): with several replicas registering at once, a few more
        may pass (docs/security.md)."""
        for _ in range(MAX_TRIES):
            obj = self._read(node)
            rec = record_of(obj)
            if rec is not None and not replace:
                return False
            doc = self._new_record(node, rec[1] if rec is not None else None, credential_hash, now, approved, by,
                                   max_pending, max_unvetted, address, max_per_address)
            if rec is None:
                if self._write(node, doc, ""):
                    return True
                if not replace:
                    return False  # registered through another replica a moment ago
            elif self._write(node, doc, _version(obj)):
                return True
        raise RuntimeError(f"node {node}: lost {MAX_TRIES} races with other replicas registering it "
                           f"(Secret {self.namespace}/{secret_name(node)}); try again")

    def registration(self, node: str) -> Optional[Registration]:
        with self._lock:
            reg = self._regs.get(node)
        if reg is None:  # maybe registered through another replica a moment ago
            rec = record_of(self._read(node))
            reg = registration_from(node, rec[1]) if rec else None
        return reg

    def registrations(self, pending: Optional[bool] = None, after: str = "", limit: int = 500) -> List[Registration]:
        self._refresh()
        with self._lock:
            names = sorted(n for n, r in self._regs.items() if n > after and (pending is None or r.pending == pending))
            return [self._regs[n] for n in names[:limit]]

    def pending_count(self) -> int:
        self._refresh()
        with self._lock:
            return sum(1 for r in self._regs.values() if r.pending)

    def unvetted_count(self) -> int:
        """The node credential Secrets in the namespace no admin approved (this replica's watched copy)."""
        self._refresh()
        with self._lock:
            return sum(1 for r in self._regs.values() if r.pending or r.by not in VETTED_BY)

    def _update_registration(self, node: str, change: Callable[[Doc], Optional[Doc]]) -> bool:
        """Compare-and-swap the node's record (``change``: the new one, None for no write; False:
        no credential), first from this process's copy: a config served to a node for the first
        time costs its fetch one request, not two. A stale copy is refused (409) and read."""
        obj = self._copy(node)
        for _ in range(MAX_TRIES):
            copied, obj = obj is not None, obj if obj is not None else self._read(node)
            rec = record_of(obj)
            if rec is None:
                return False
            doc = change(dict(rec[1]))
            if doc is None and not copied:
                return True
            if doc is not None and self._write(node, doc, _version(obj)):
                return True
            obj = None  # written or deleted meanwhile (or unchanged in a copy): read it
        raise RuntimeError(f"node {node}: lost {MAX_TRIES} races with other replicas updating its registration "
                           f"(Secret {self.namespace}/{secret_name(node)}); try again")

    def _copy(self, node: str) -> Optional[Dict[str, Any]]:
        """The node's Secret as the watch, or this process's last read or write, left it."""
        with self._lock:
            obj = self._secrets.objects.get(secret_name(node))
        rec = record_of(obj)
        return obj if rec is not None and rec[0] == node else None

    def forget(self, node: str) -> bool:
        """Delete the node's credential record; True if there was one."""
        name = secret_name(node)
        try:
            with permission("delete", SECRETS, self.namespace):
                obj = self.client.delete(SECRETS.path(name, self.namespace))
        except KubeError as exc:
            if exc.status == 404:
                with self._lock:  # gone already (another replica): drop it here too
                    self._index(self._secrets.put({"metadata": {"name": name}}, deleted=True))
                return False
            raise
        gone = obj if (obj.get("metadata") or {}).get("name") == name else {"metadata": {"name": name}}
        self._note(gone, deleted=True)
        return True


def _slim(obj: Dict[str, Any]) -> Dict[str, Any]:
    """What memory keeps of a Secret: what record_of() and the version merge read (a third of
    the object the API sends: no uid, labels, timestamps or managedFields)."""
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "resourceVersion", "annotations") if k in meta},
            "type": obj.get("type"), "data": obj.get("data")}


def _version(obj: Optional[Dict[str, Any]]) -> str:
    return str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
