"""The node store: what the server remembers about nodes, kept so that no request costs O(nodes).

One interface, two implementations planned: SQLite (``sqlite.nodestore.SqliteNodeStore``, one
server or several gunicorn workers on one host) and etcd (replicas; issue 20). The service
(``service.Cluster``) talks to node state only through this interface.

Contract (every implementation must keep it; ``tests/etcd/test_nodestore.py`` checks it against any
store it is given):

- **Reports.** ``record_report(node, body, member, now)`` stores the newest report of a node
  with the membership the service computed for it (``progress.Membership``), and in the same
  atomic step updates the per-pool counters and the proofs (below), and ends the node's drain
  lease when it reports ``Done`` on the leased config. Cost: independent of the node count.
- **Counters.** ``counts(pool)`` -> ``PoolCounts``: how many nodes are in the pool and how many
  of them reported each state, how many are degraded (reported ``Degraded`` or an ambiguous
  membership) and how many were refused by skew rules. Read in O(1).
- **Proofs.** ``proof(pool, config, image=None)`` -> ``Proof``: how many nodes of the pool are
  ``Done`` on ``config`` (and, when ``image`` is given, run that image), and how many of those
  are ready (not degraded). This is what gating and rollouts ask ("has any node proven the
  target?", "are all nodes done?"). Read in O(number of images of that config), i.e. O(1).
- **Membership.** A node's pool is computed from the pools' selectors when it reports. When the
  pools change (``membership_signature`` differs), ``rebuild(signature, assign)`` re-assigns
  every node with ``assign(report) -> Membership`` and recomputes every counter: the one O(N)
  operation, run once per change of the pools, not per request.
- **Listing.** ``node(name)`` and ``nodes(pool, after, limit)`` (name order, paged) return
  ``NodeRecord``; nothing else hands out all nodes. ``open_first_boots(pool)``: the nodes whose
  first boot is not done, indexed (a pool view or a scrape costs O(them), not O(nodes)).
- **Leases.** ``acquire_lease`` / ``release_lease`` / ``leases`` / ``drain_events``: at most
  ``limit`` holders per pool, expiring after ``ttl``; acquire and release are atomic.
- **Pools and rendered configs.** ``pools()``, ``update_pool(name, decide)`` (an atomic
  read-modify-write: ``decide(old_row_or_None)`` returns the new ``PoolRow`` or None for no
  change; it is pure and may run more than once, e.g. on an etcd compare-and-swap retry),
  ``history(pool)``; ``put_rendered`` / ``rendered_spec`` / ``rendered_pool``: rendered configs
  are immutable under their name. Renderings are shared: ``rendered_for(inputs)`` finds the
  rendered config made from the same inputs (a hash of the pool, its MachineConfigs and the
  render code), and ``claim_render(inputs, now, stale_after)`` lets one worker render while the
  others wait for its result (a claim older than ``stale_after`` can be taken over).
- **Serving snapshot.** ``serving(pool, node)`` -> ``Serving``: everything a config fetch needs
  from the store (state signature seen by the fleet, the pool's row, the proofs of its target,
  the asking node's membership) in **one** round trip.
- **Identity.** ``credential(node)`` (the stored hash or None), ``credential_owner(hash)`` (the
  node whose credential hashes to it, or None), ``put_credential(node, hash, now, replace)``
  (atomic: without ``replace`` it stores nothing and returns False when the node already has
  one). Only hashes are stored (``identity.credential_hash``).
- **Registrations (approval).** ``registration(node)`` -> ``Registration`` or None: the node's
  credential row with its approval (``approved`` time, 0 while pending, ``by`` whom or what
  rule), the ``labels`` the admin vouched for and the configs ``served`` to it as itself.
  ``put_credential(..., max_pending, max_unvetted, address, max_per_address)`` stores a new name
  only while fewer than ``max_pending`` are pending, ``max_unvetted`` unvetted and
  ``max_per_address`` pending ones came from ``address``, counted in the store (else
  ``TooManyPending`` / ``TooManyUnvetted`` / ``TooManyFromAddress``, nothing stored); the record
  keeps ``address``; ``approve(node, now, by, labels)``,
  ``note_served``, ``pending_count()``, ``unvetted_count()``, ``registrations(pending, after, limit)``.
  A report carries the server's own mark under ``SERVER_KEY`` (set by the service, never by a
  node): a pending node's report counts for nothing, and a Done report marked ``proof: false``
  counts as a node but proves nothing (``contribution``).
- **Deleting a node.** ``delete_node(node, now)`` -> ``Deleted``: its report, its share of the
  counters and proofs, its lease and its credential go in one atomic step.
- Meta: ``meta(key)`` / ``set_meta(key, value)`` for small shared strings (state signature).
- **What the engine is and shares** (the service asks, never guesses from a class): ``kind``,
  ``alarms()``, ``last_seen()``, ``observe()``, ``replicas()``, ``start_heartbeat()`` below.

Times are Unix seconds. Names are already validated by the caller (DNS-1123).
"""

import abc
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.rollout.progress import Counts, Membership

# A registration and its approvals: registration.py; the names stay importable from here.
from agent.server.store.registration import (  # noqa: F401
    APPROVERS_MANAGED,
    BINDS_NODE,
    PROVEN_BY,
    SERVED_KEEP,
    VETTED_BY,
    Registration,
    registration_from,
)

STATES = ("Done", "Working", "Degraded")
SERVER_KEY = "_server"  # the server's own mark on a stored report (identity.py): nodes cannot send it


@dataclass(frozen=True)
class NodeRecord:
    node: str
    pool: str
    why: str  # how the pool was decided
    degraded: str  # non-empty: an ambiguous membership (two custom pools)
    report: Dict[str, Any]
    received: float

    def membership(self) -> Membership:
        return Membership(self.pool, self.why, self.degraded)


@dataclass(frozen=True)
class PoolCounts:
    machine: int = 0
    done: int = 0
    working: int = 0
    reported_degraded: int = 0
    degraded: int = 0  # reported Degraded or an ambiguous membership
    refused: int = 0


@dataclass(frozen=True)
class Proof:
    updated: int = 0  # Done on the config (and image)
    ready: int = 0  # of those, not degraded


@dataclass(frozen=True)
class PoolRow:
    name: str
    target: str
    current: str
    held: str = ""
    rendered: str = ""
    rollout: Dict[str, Any] = field(default_factory=dict)  # the nodes targeted (rollout/targeting.py): one CAS with the row

    def as_dict(self) -> Dict[str, Any]:
        return {"name": self.name, "target": self.target, "current": self.current, "held": self.held,
                "rendered": self.rendered, "rollout": self.rollout}

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "PoolRow":
        """A row as a store keeps it (SQLite: the rollout as JSON text); unknown keys left out."""
        rollout = json.loads(d["rollout"] or "{}") if isinstance(d.get("rollout"), str) else (d.get("rollout") or {})
        return cls(str(d["name"]), str(d["target"]), str(d["current"]), str(d.get("held") or ""),
                   str(d.get("rendered") or ""), rollout if isinstance(rollout, dict) else {})


@dataclass(frozen=True)
class Recorded:
    released: bool  # the node's drain lease ended (Done on the leased config)
    previous_pool: Optional[str]  # the pool the node was in before this report (None: new node)


@dataclass(frozen=True)
class Deleted:
    existed: bool  # the node had a report, a credential or a lease
    previous_pool: Optional[str]  # the pool it counted in (None: it never reported)
    lease_pool: Optional[str]  # the pool whose drain lease it held (None: none)


@dataclass(frozen=True)
class Serving:
    """One round trip's worth of what a config fetch needs."""
    state_signature: Optional[str]
    pool: Optional[PoolRow]
    target_proofs: Dict[str, Proof] = field(default_factory=dict)  # image ("" = none reported) -> proof
    node: Optional[NodeRecord] = None

    def target_proof(self, image: Optional[str]) -> Proof:
        if image is not None:
            return self.target_proofs.get(image, Proof())
        return Proof(sum(p.updated for p in self.target_proofs.values()),
                     sum(p.ready for p in self.target_proofs.values()))


def counts_for(pc: PoolCounts, proof: Proof) -> Counts:
    """The progress.Counts of a pool against one (target, image)."""
    return Counts(machine=pc.machine, updated=proof.updated, ready=proof.ready, degraded=pc.degraded,
                  refused=pc.refused, working=pc.working)


# The "drain" entry of a node's drain log, written when its lease is granted: the store cannot
# tell the backend, and with --backend kubernetes the evictions happen after it, before the
# node's lease request is answered (the Node's drain state has them: agent/server/cluster/drainpacer.py).
DRAIN_GRANTED = ("lease granted; --backend kubernetes drains the Node before answering the node, "
                 "the directory backend has no pods to evict")


def lease_ends(lease_config: str, body: Dict[str, Any]) -> bool:
    """A Done report ends the lease taken for its config (or for no particular config)."""
    current = str(body.get("currentConfig") or "")
    return not (lease_config and current and lease_config != current)


def contribution(pool: str, member_degraded: str, report: Dict[str, Any]):
    """What one node adds to the counters: (pool, counter deltas, proof key or None, ready).
    A pending node (the server's mark, ``SERVER_KEY``) adds nothing; a Done report the server
    marked ``proof: false`` (a config never served to the node) counts the node but proves
    nothing."""
    mark = report.get(SERVER_KEY)
    mark = mark if isinstance(mark, dict) else {}
    state = report.get("state")
    if mark.get("pending"):
        return dict.fromkeys(("machine", "done", "working", "reported_degraded", "degraded", "refused"), 0), None, 0
    deltas = {"machine": 1, "done": int(state == "Done"), "working": int(state == "Working"),
              "reported_degraded": int(state == "Degraded"),
              "degraded": int(state == "Degraded" or bool(member_degraded)),
              "refused": int(report.get("skew") == "refuse")}
    proof_key = None
    if state == "Done" and report.get("currentConfig") is not None and mark.get("proof", True) is not False:
        proof_key = (pool, str(report.get("currentConfig") or ""), str(report.get("currentImage") or ""))
    return deltas, proof_key, int(not member_degraded)


class NodeStore(abc.ABC):
    # -- the engine and what it shares with other replicas ---------------------------------------
    kind: str = ""  # "sqlite", "etcd" or "kubernetes": /healthz, /api/v1/cluster and status name it

    def alarms(self) -> List[Dict[str, str]]:
        """Raised conditions that make the store refuse writes, [{"alarm": ..., "member": ...}]."""
        return []

    def last_seen(self) -> Optional[float]:
        """When a shared store last answered this process (Unix time); None for a local file."""
        return None

    def replicas(self) -> Optional[List[Dict[str, Any]]]:
        """Every live replica's announced view (start_heartbeat); None: the engine keeps no such
        list, so this process's own view is the whole list."""
        return None

    def observe(self, observer: Callable[[str, float, bool], None]) -> None:  # noqa: B027 - local stores: nothing
        """Call ``observer(api_path, seconds, ok)`` after every round trip to a shared store
        (/metrics' store latency and errors); a local file has no round trips to tell."""

    def share_worker_turns(self, directory: str) -> None:  # noqa: B027 - stores with no refused writes: nothing
        """Take turns with the server's other workers, through ``directory`` (serve's per-run
        one), at the writes they would race for: a store whose writes another worker can make
        refused saves them (kube/workerturns.py)."""

    def start_heartbeat(self, name: str, describe: Callable[[], Dict[str, Any]]) -> Optional[Any]:
        """Announce ``describe()`` as replica ``name`` every few seconds until ``close`` or the
        returned heartbeat's ``stop()``; None when there are no other replicas to tell (a local store)."""
        return None

    # -- nodes --------------------------------------------------------------------------------
    @abc.abstractmethod
    def record_report(self, node: str, body: Dict[str, Any], member: Membership, now: float) -> "Recorded":
        """Store the report (and update counters, proofs, the node's lease) atomically."""

    @abc.abstractmethod
    def node(self, node: str) -> Optional[NodeRecord]:
        ...

    @abc.abstractmethod
    def nodes(self, pool: Optional[str] = None, after: str = "", limit: int = 500) -> List[NodeRecord]:
        ...

    @abc.abstractmethod
    def counts(self, pool: str) -> PoolCounts:
        ...

    def open_first_boots(self, pool: Optional[str] = None) -> List[NodeRecord]:
        """The nodes (of ``pool``) whose first boot is not done (``firstboots.is_open``), in name
        order; the stores index them (O(their number)), this default reads every node."""
        from agent.server.rollout.firstboots import is_open

        return [r for r in self.nodes(pool=pool, limit=1 << 30) if is_open(r.report)]

    @abc.abstractmethod
    def proof(self, pool: str, config: str, image: Optional[str] = None) -> Proof:
        ...

    @abc.abstractmethod
    def membership_signature(self) -> Optional[str]:
        ...

    @abc.abstractmethod
    def rebuild(self, signature: str, assign: Callable[[Dict[str, Any]], Membership]) -> int:
        """Re-assign every node and recompute all counters; returns the number of nodes."""

    @abc.abstractmethod
    def delete_node(self, node: str, now: float) -> "Deleted":
        """Remove the node: report, counters and proofs, lease, credential (atomically)."""

    # -- identity -------------------------------------------------------------------------------
    @abc.abstractmethod
    def credential(self, node: str) -> Optional[str]:
        ...

    @abc.abstractmethod
    def credential_owner(self, credential_hash: str) -> Optional[str]:
        ...

    @abc.abstractmethod
    def put_credential(self, node: str, credential_hash: str, now: float, replace: bool, approved: bool = True,
                       by: str = "", max_pending: Optional[int] = None, max_unvetted: Optional[int] = None,
                       address: str = "", max_per_address: Optional[int] = None) -> bool:
        """Store the node's credential hash; without ``replace``, only if it has none (-> False).
        A new name is approved (by ``by``) or pending, while the caps allow (above); ``replace`` keeps its approval."""

    @abc.abstractmethod
    def registration(self, node: str) -> Optional[Registration]:
        ...

    @abc.abstractmethod
    def registrations(self, pending: Optional[bool] = None, after: str = "", limit: int = 500) -> List[Registration]:
        ...

    def member_texts(self, pool: str) -> Optional[List[Tuple[str, str, float, float]]]:
        """(node, its report as stored JSON text, received, when its registration was made or 0)
        of every node of ``pool``, by name, for a store that keeps reports as text: the pool's
        step parses only the reports that changed since it last read them (rolloutctl). None:
        the store keeps them parsed (read ``nodes`` and ``registrations``)."""
        return None

    def member_changes(self, after: Optional[int]) -> Optional[Tuple[int, List[Tuple[str, str, str, float, float]]]]:
        """For a store that numbers its changes (SQLite): the newest number and (node, pool or ""
        once gone, report text, received, registered) of each node changed after ``after``, so a
        pool's step reads only those (members.MemberMemo). None: not known here (read the pool
        whole with ``member_texts``)."""
        return None

    @abc.abstractmethod
    def pending_count(self) -> int:
        ...

    @abc.abstractmethod
    def unvetted_count(self) -> int:
        """Registrations not approved by one of ``VETTED_BY``."""

    @abc.abstractmethod
    def approve(self, node: str, now: float, by: str, labels: Optional[Dict[str, str]] = None) -> Optional[Registration]:
        """Approve a registered node (again: ``labels`` replace the vouched ones when given);
        None when the node has no credential."""

    @abc.abstractmethod
    def note_served(self, node: str, config: str) -> None:
        """Remember that ``config`` was served to ``node`` as itself (the newest SERVED_KEEP)."""

    # -- leases -------------------------------------------------------------------------------
    @abc.abstractmethod
    def acquire_lease(self, node: str, pool: str, config: str, limit: int, ttl: float, now: float):
        """-> drains.DrainAnswer (granted, holders, retry_after ...)."""

    @abc.abstractmethod
    def release_lease(self, node: str, why: str) -> Optional[str]:
        ...

    @abc.abstractmethod
    def leases(self, pool: Optional[str] = None, now: Optional[float] = None) -> List[Dict[str, Any]]:
        ...

    @abc.abstractmethod
    def drain_events(self, node: Optional[str] = None) -> List[Dict[str, Any]]:
        ...

    # -- pools, rendered configs, meta ----------------------------------------------------------
    @abc.abstractmethod
    def pools(self) -> Dict[str, PoolRow]:
        ...

    @abc.abstractmethod
    def update_pool(self, name: str, decide: Callable[[Optional[PoolRow]], Optional[PoolRow]]) -> PoolRow:
        ...

    @abc.abstractmethod
    def history(self, pool: str) -> List[Dict[str, Any]]:
        ...

    @abc.abstractmethod
    def put_rendered(self, pool: str, name: str, spec: Dict[str, Any], sources: List[str], inputs: str = "") -> None:
        ...

    def rendered_for(self, inputs: str) -> Optional[Tuple[str, Dict[str, Any], List[str]]]:
        """(name, spec, sources) of the rendering made from ``inputs``, or None. The default
        shares nothing (every process renders for itself)."""
        return None

    def claim_render(self, inputs: str, now: float, stale_after: float) -> bool:
        """True: the caller renders ``inputs`` (and then put_rendered(..., inputs=...));
        False: another worker is rendering it right now. The default: always render."""
        return True

    @abc.abstractmethod
    def rendered_spec(self, name: str) -> Optional[Dict[str, Any]]:
        ...

    @abc.abstractmethod
    def rendered_pool(self, name: str) -> Optional[str]:
        ...

    @abc.abstractmethod
    def meta(self, key: str) -> Optional[str]:
        ...

    @abc.abstractmethod
    def set_meta(self, key: str, value: str) -> None:
        ...

    @abc.abstractmethod
    def serving(self, pool: str, node: Optional[str] = None) -> Serving:
        ...

    def generation(self) -> Any:
        """A value that changes whenever anything is stored (by any process), cheap to read:
        what a worker keeps is good while it has not changed (fetchmemo.py). None: no such value
        (then nothing is kept)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional: most stores have nothing to release
        """Release connections of the calling thread (optional)."""
