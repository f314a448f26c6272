"""Serving configs: the fetch path of ``service.Cluster`` (a mixin: it uses the cluster's store,
state, decisions memo and body cache).

A config fetch costs one store round trip (``NodeStore.serving``); what it decides is memoised
on its inputs (state, target, current, proof count, membership), shared by the worker's
threads, and bodies are cached per (pool, config, image, state, Accept) with a single flight,
so a scale-up storm costs no re-rendering and reports never invalidate the rendered bodies.
"""

import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional, Tuple

from agent.core.secretfiles import SECRET_PATHS
from agent.server.cluster import content
from agent.server.cluster.accept import negotiate_version
from agent.server.rollout import gating
from agent.server.store.nodestore import NodeRecord, PoolRow
from agent.server.store.stateformat import State

log = logging.getLogger(__name__)


class UnknownPool(KeyError):
    pass


@dataclass(frozen=True)
class Fetch:
    body: bytes
    etag: str
    version: str
    served: gating.Served
    node: Optional[NodeRecord]  # the asking node as the store knows it (None: anonymous or unknown)
    secrets: Tuple[str, ...] = ()  # paths of files in the body that hold credentials (secret_paths)
    rollout: Tuple[str, str] = ("", "")  # a member's (state, why): updating, done, waiting, deferred
    note: Optional[Tuple[str, str]] = None  # (node, config) to remember as served once answered (approval.py)


def secret_paths(document: Dict[str, Any]) -> Tuple[str, ...]:
    """The files of a served Ignition document that hold credentials (agent/core/secretfiles.py:
    the pull secret, the bootstrap kubeconfig...): such a config is served only with a
    credential (agent/server/rollout/identity.py). Works for spec 2.2 and 3.x (same storage.files)."""
    files = ((document.get("storage") or {}).get("files") or []) if isinstance(document, dict) else []
    return tuple(sorted({f.get("path") for f in files if isinstance(f, dict) and f.get("path") in SECRET_PATHS}))


class HoldInputs(NamedTuple):
    """A held fetch's inputs: what its body is made from (``decides``), the node's record and the
    pool's row. Only ``decides`` changes the body and so the ETag that ends the hold: the state's
    part a member of the pool is served from (``pool_serving_key``), and the config, image and
    layering served to this node, decided from its record and its part of the row
    (rolloutctl.desired_for, gating.for_member). A step that targets other nodes, a report that
    changes nothing it is served, or a new MachineConfig that renders a new target this node is
    not targeted to yet change the rest only, which says why the node waits: the fetch compares
    (``same_config``) rather than making its answer again. With a thousand held fetches, making
    each answer again at every change was a fifth of a worker's CPU, and after a new
    MachineConfig the targeted nodes' answers waited behind the thousand others'
    (docs/performance.md, "Rollout at fleet scale"); comparing these costs microseconds."""
    decides: Any
    rec: Any
    row: Any

    def same_config(self, other: Optional["HoldInputs"]) -> bool:
        return other is not None and self.decides == other.decides


def pool_serving_key(st: State, pool: str) -> str:
    """What a member's body of ``pool`` is made from in the state besides its rendered config
    (content.build_document: the pool object, the cluster's spec, the bootstrap files; the
    MachineOSConfigs and builds are decided per node, ``HoldInputs``). Not the MachineConfigs:
    a rendered config is named by the hash of its content (render.py), so a new MachineConfig
    changes a member's body only through the config the targeting gives it. Pure."""
    h = hashlib.sha256(json.dumps([st.pools.get(pool), st.cluster_spec], sort_keys=True, default=str).encode())
    for name in sorted(st.bootstrap or {}):
        h.update(b"\0" + name.encode() + b"\0" + hashlib.sha256(st.bootstrap[name]).digest())
    return h.hexdigest()[:32]


class ConfigServing:
    # -- serving configs -------------------------------------------------------------------------

    def fetch_generation(self) -> Any:
        """Read before a new node's fetch: while it is the same, so is the answer
        (agent/server/http/fetchmemo.py). None when the answer must be made afresh: the store has no
        generation, the state served is not reconciled yet, or the store was away."""
        gen = self.store.generation()
        if gen is None or self.store_error:
            return None
        st = self.watcher.current()  # also looks at the state directory when it is due
        if st.signature != self._reconciled_sig:
            return None
        if self.node_truth is not None:  # proofs also move with the Node objects (kube_nodes.py)
            return gen, st.signature, self.node_truth.node_cache.changes
        return gen, st.signature

    def hold_inputs(self, pool: str, named: Optional[str]) -> Optional["HoldInputs"]:
        """What a member's answer is made from (rolloutctl.desired_for, then ``fetch``), for a held
        fetch; None when the node is no member of ``pool`` (a new node's answer also depends on
        proofs)."""
        rec = self.store.node(named) if named is not None else None
        if rec is None or rec.pool != pool:
            return None
        row = self.store.pools().get(pool)
        st = self.watcher.current()
        if row is None or pool not in st.pools:
            return HoldInputs((st.signature, None), rec, row)
        key = ("serving", st.signature, pool)
        made = self._decisions.get(key)
        if made is None:
            made = pool_serving_key(st, pool)
            self._remember(key, made)
        config, image, state, _ = self.desired_for(rec, row, self._layered(st, pool, row.target))
        served = self._member_decision(st, pool, config, image, state in ("updating", "done") and image is not None)
        decides = (made, served.config, served.image, served.layered,
                   self.is_empty_rendering(served.config))
        return HoldInputs(decides, rec, row)

    def fetch(self, pool_name: str, accept: Optional[str], node: Optional[str] = None) -> Fetch:
        """A config fetch: one store round trip, then memoised decisions and cached bodies.

        A node naming itself (``node``) that the store knows as a member of ``pool_name`` gets
        the config the server targeted for it (rolloutctl.desired_for: the pool's target only once
        its turn came); anyone else what a new node may have (gating). Raises UnknownPool
        and accept.UnsupportedVersion / content.ConversionFailed. Bodies are cached per (pool, config, image, state, Accept),
        so a scale-up storm costs no re-rendering, and one thread renders while the others wait.
        """
        snap = self.store.serving(pool_name, node)
        if snap.node is not None and snap.node.pool == pool_name and self.caught_up(snap.node):
            snap = self.store.serving(pool_name, node)  # after the step of its own report
        reconciled = self._reconciled_sig
        st = self.state(seen=snap.state_signature)
        if pool_name not in st.pools:
            raise UnknownPool(pool_name)
        row = snap.pool
        # This worker reconciled just now (this call, or another it waited for: its steps may have
        # targeted the node since the snapshot; a new state wakes every held fetch, and each then
        # answered from the row before its targeting)
        if row is None or snap.state_signature != st.signature or self._reconciled_sig != reconciled:
            snap = self.store.serving(pool_name, node)
            row = snap.pool
            if row is None:
                raise UnknownPool(pool_name)
        member = snap.node is not None and snap.node.pool == pool_name
        rollout = ("", "")
        if member:  # the config the server targeted for it (rolloutctl.desired_for), never the pool's by itself
            config, image, state, why = self.desired_for(snap.node, row, self._layered(st, pool_name, row.target))
            # A targeted node's image is the server's decision, stored with its target: served as its
            # layered image even by a worker whose own state does not show the build yet.
            targeted = state in ("updating", "done") and image is not None
            served, rollout = self._member_decision(st, pool_name, config, image, targeted), (state, why)
        else:
            image = self._layered(st, pool_name, row.target)
            updated = self._proof(st, pool_name, row.target, image, snap.target_proof(image).updated)
            served = self._new_node_decision(st, pool_name, row, updated, self._current_proof(st, pool_name, row, updated))
        body, etag, version, secrets = self._body(pool_name, st, served, accept)
        return Fetch(body, etag, version, served, snap.node, secrets, rollout)

    def _current_proof(self, st: State, pool: str, row: PoolRow, updated: int) -> int:
        """Nodes Done on the current config with its layered image: proof for what a new node is
        served while the target is unproven (one more store query, only in that window)."""
        if row.target == row.current or updated > 0:
            return 0
        image = self._layered(st, pool, row.current)
        if not image:
            return 0
        return self._proof(st, pool, row.current, image, None)

    def _proof(self, st: State, pool: str, config: str, image: Optional[str], stored: Optional[int]) -> int:
        """Nodes Done on ``config`` (and ``image``): from the Node objects with the Kubernetes
        backend (a name with no Node proves nothing: kube_nodes.py), else the store's proof."""
        if self.node_truth is not None and self.node_truth.ready():
            return self.node_truth.status(pool, st.pools, config, image).proven
        return self.store.proof(pool, config, image).updated if stored is None else stored

    def _new_node_decision(self, st: State, pool: str, row: PoolRow, updated: int,
                           current_proof: int = 0) -> gating.Served:
        key = ("new", st.signature, pool, row.target, row.current, updated, current_proof)
        hit = self._decisions.get(key)
        if hit is None:
            hit = gating.decide(pool, row.target, row.current, updated, self._base_images(row.target, row.current),
                                st.os_configs, st.os_builds, current_proof)
            self._remember(key, hit)
        return hit

    def _member_decision(self, st: State, pool: str, config: str, running: Optional[str] = None,
                         targeted: bool = False) -> gating.Served:
        """``running``: the image a member not targeted runs (it keeps it until its turn), or with
        ``targeted`` the layered image the server targeted it to."""
        key = ("member", st.signature, pool, config, running, targeted)
        hit = self._decisions.get(key)
        if hit is None:
            hit = gating.for_member(pool, config, self._base_images(config), st.os_configs, st.os_builds, running,
                                    targeted)
            self._remember(key, hit)
        return hit

    def _body(self, pool_name: str, st: State, served: gating.Served,
              accept: Optional[str]) -> Tuple[bytes, str, str, Tuple[str, ...]]:
        key = (pool_name, served.config, served.image, st.signature, accept or "")
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit
            # Single flight: in a storm, one thread renders and the others wait for its result.
            flight = self._flights.setdefault(key, threading.Lock())
        with flight:
            with self._cache_lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit
            try:
                return self._render_into_cache(key, pool_name, st, served, accept)
            finally:
                with self._cache_lock:
                    self._flights.pop(key, None)

    def prerender(self) -> None:
        """Fill the cache for every pool with the usual Accept headers (a worker starts warm)."""
        for name in self.state().pools:
            for accept in (None, "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"):
                try:
                    self.fetch(name, accept)
                except Exception as exc:  # warming is an optimisation, never a failure
                    log.debug("prerender of %s failed: %s", name, exc)

    def _render_into_cache(self, key: Tuple, pool_name: str, st: State, served: gating.Served,
                           accept: Optional[str]) -> Tuple[bytes, str, str, Tuple[str, ...]]:
        spec = self.spec_of(served.config) or {}
        version = negotiate_version(accept)
        converted = content.build_document(st.pools[pool_name], served.config, spec, served.image, st.cluster_spec,
                                           version=version, layered=served.layered, bootstrap=st.bootstrap)
        body = content.render_bytes(converted)
        etag = '"' + hashlib.sha256(body).hexdigest()[:40] + '"'
        entry = (body, etag, version, secret_paths(converted))
        with self._cache_lock:
            self._cache[key] = entry
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return entry

