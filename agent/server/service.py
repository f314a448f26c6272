"""The server's imperative core: state directory + SQLite, tied together by ``reconcile``.

``reconcile`` renders every pool, stores new rendered configs, and moves each pool's target
and current per ``progress.rollout_step``. It runs in one write transaction (``BEGIN
IMMEDIATE``), so several gunicorn workers doing it at once agree, and it is idempotent.
It runs when a worker sees a new state directory and after every report.
"""

import hashlib
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Tuple

from agent.server import content, gating, progress
from agent.server.db import Database
from agent.server.drains import DEFAULT_TTL, parse_max_unavailable, release_in
from agent.server.render import Rendered, render_pool
from agent.server.store import State, StateWatcher, pool_forced

log = logging.getLogger(__name__)

REPORT_FIELDS = ("pool", "currentConfig", "desiredConfig", "firstPivotConfig", "currentImage", "state",
                 "bootImage", "skew", "reason", "labels", "desiredImage")
SKEW_VALUES = ("ok", "warn", "refuse")


class ReportInvalid(ValueError):
    def __init__(self, field: str, message: str):
        self.field = field
        super().__init__(f"{field}: {message}")


def validate_report(body: Any) -> Dict[str, Any]:
    """A node report (ARCHITECTURE); raises ReportInvalid naming the field."""
    if not isinstance(body, dict):
        raise ReportInvalid("$", "the report must be a JSON object")
    for key in body:
        if key not in REPORT_FIELDS:
            raise ReportInvalid(f"$.{key}", f"unknown field; known: {', '.join(REPORT_FIELDS)}")
    from agent.server.store import DNS1123_LABEL

    pool = body.get("pool")
    if not isinstance(pool, str) or not DNS1123_LABEL.match(pool):
        raise ReportInvalid("$.pool", "required: the pool name (a DNS-1123 label)")
    if body.get("state") not in progress.STATES:
        raise ReportInvalid("$.state", f"required: one of {', '.join(progress.STATES)}")
    for key in ("currentConfig", "desiredConfig", "firstPivotConfig", "currentImage", "desiredImage",
                "bootImage", "reason"):
        if key in body and body[key] is not None and not isinstance(body[key], str):
            raise ReportInvalid(f"$.{key}", "must be a string")
        if isinstance(body.get(key), str) and len(body[key]) > 4096:
            raise ReportInvalid(f"$.{key}", "too long (at most 4096 characters)")
    if body.get("skew") is not None and body.get("skew") not in SKEW_VALUES:
        raise ReportInvalid("$.skew", f"must be one of {', '.join(SKEW_VALUES)}")
    labels = body.get("labels")
    if labels is not None and (not isinstance(labels, dict) or
                               not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())):
        raise ReportInvalid("$.labels", "must be a map of label name to string value")
    return {k: v for k, v in body.items() if v is not None}


class Cluster:
    def __init__(self, state_dir: str, db_path: Optional[str] = None, lease_ttl: float = DEFAULT_TTL,
                 reload_interval: float = 1.0):
        import os

        self.state_dir = state_dir
        self.db = Database(db_path or os.path.join(state_dir, "nodes.db"))
        self.watcher = StateWatcher(state_dir, reload_interval)
        self.lease_ttl = lease_ttl
        self._reconciled_sig = None
        self._lock = threading.Lock()
        self._rendered: Dict[str, Rendered] = {}
        self._old_specs: Dict[str, Dict[str, Any]] = {}
        self._cache: OrderedDict[Tuple, Tuple[bytes, str]] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._flights: Dict[Tuple, threading.Lock] = {}
        self._local = threading.local()
        self.cache_size = 64
        self.reconcile(force=True)

    # -- state and reconcile -----------------------------------------------------------------

    def state(self) -> State:
        st = self.watcher.current()
        seen = self.db.meta("state_signature")
        if seen is not None and seen != st.signature and not st.stale:
            # Another worker has seen different files: look now, so that every worker serves
            # the same state as soon as one of them has noticed a change (no flip-flop).
            st = self.watcher.current(check_now=True)
        if st.signature != self._reconciled_sig:
            self.reconcile()
        return st

    def render_all(self, st: State) -> Dict[str, Rendered]:
        return {name: render_pool(pool, st.machine_configs) for name, pool in st.pools.items()}

    def reconcile(self, force: bool = False) -> None:
        with self._lock:
            st = self.watcher.current()
            fresh = st.signature != self._reconciled_sig
            rendered = self.render_all(st) if fresh else self._rendered
            if fresh:  # membership (firstPivotConfig) must know the new names before counting
                self._rendered = rendered
            reports = self.db.reports()
            with self.db.write() as c:
                rows = {r["name"]: dict(r) for r in c.execute("SELECT * FROM pools").fetchall()}
                Database.set_meta(c, "state_signature", st.signature)
                if fresh:
                    for name, r in rendered.items():
                        Database.put_rendered(c, name, r.name, r.spec, list(r.sources))
                members = self._members(st, reports)
                for name, r in sorted(rendered.items()):
                    row = rows.get(name)
                    target = row["target"] if row else r.name
                    image = gating.layered_image(name, target, st.os_configs, st.os_builds)
                    counts = progress.count(members.get(name, {}), target, image)
                    paused = bool((st.pools[name].get("spec") or {}).get("paused"))
                    step = progress.rollout_step(r.name, row, paused, st.force_rollout or pool_forced(st.pools[name]),
                                                 counts)
                    if row is None or (step.target, step.current, step.held, r.name) != (
                            row["target"], row["current"], row["held"], row["rendered"]):
                        if row is None or step.target != row["target"] or step.current != row["current"]:
                            log.info("pool %s: target %s, current %s%s", name, step.target, step.current,
                                     f" ({step.held})" if step.held else "")
                        Database.set_pool(c, name, step.target, step.current, step.held, r.name, row)
            self._rendered = rendered
            self._reconciled_sig = st.signature

    def pool_of_rendered(self, name: str) -> Optional[str]:
        for r in self._rendered.values():
            if r.name == name:
                return r.pool
        return self.db.rendered_pool(name)

    def _members(self, st: State, reports: Dict[str, Dict[str, Any]]
                 ) -> Dict[str, Dict[str, Tuple[Dict[str, Any], progress.Membership]]]:
        out: Dict[str, Dict[str, Any]] = {}
        for node, report in reports.items():
            m = progress.membership(report, st.pools, self.pool_of_rendered)
            out.setdefault(m.pool, {})[node] = (report, m)
        return out

    # -- views -----------------------------------------------------------------------------

    def pool_views(self, only: Optional[str] = None, pending: bool = True) -> Dict[str, Dict[str, Any]]:
        st = self.state()
        rows = self.db.pools()
        members = self._members(st, self.db.reports())
        leases = self.db.leases()
        views = {}
        for name, pool in sorted(st.pools.items()):
            row = rows.get(name)
            if row is None or (only is not None and name != only):
                continue
            views[name] = self._view(st, name, pool, row, members.get(name, {}), leases, pending)
        return views

    def _base_images(self, *names: str) -> Dict[str, str]:
        out = {}
        for n in names:
            spec = self.spec_of(n)
            out[n] = (spec or {}).get("osImageURL", "")
        return out

    def is_empty_rendering(self, rendered_name: str) -> bool:
        for r in self._rendered.values():
            if r.name == rendered_name:
                return not r.sources
        return False

    def spec_of(self, rendered_name: str) -> Optional[Dict[str, Any]]:
        for r in self._rendered.values():
            if r.name == rendered_name:
                return r.spec
        # Rendered configs never change under a name: older ones are cached once read.
        spec = self._old_specs.get(rendered_name)
        if spec is None:
            spec = self.db.rendered_spec(rendered_name)
            if spec is not None:
                if len(self._old_specs) > 16:
                    self._old_specs.clear()
                self._old_specs[rendered_name] = spec
        return spec

    def _view(self, st: State, name: str, pool: Dict[str, Any], row: Dict[str, Any],
              members: Dict[str, Any], leases: List[Dict[str, Any]], pending: bool = True) -> Dict[str, Any]:
        target, current = row["target"], row["current"]
        image = gating.layered_image(name, target, st.os_configs, st.os_builds)
        counts = progress.count(members, target, image)
        served = gating.decide(name, target, current, counts.updated, self._base_images(target, current),
                               st.os_configs, st.os_builds)
        spec = dict(pool.get("spec") or {})
        spec["configuration"] = {"name": target}
        limit = parse_max_unavailable(spec.get("maxUnavailable"), counts.machine)
        status: Dict[str, Any] = {
            "configuration": {"name": current},
            "rendered": row.get("rendered") or "",
            "observedGeneration": 1,
            **counts.to_status(),
            "served": served.to_dict(),
            "held": row.get("held") or "",
            "layeredImage": image or "",
            "nodes": {node: {"state": rep.get("state"), "currentConfig": rep.get("currentConfig", ""),
                             "currentImage": rep.get("currentImage", ""), "skew": rep.get("skew", ""),
                             "membership": m.why, **({"degradedReason": m.degraded} if m.degraded else {}),
                             **({"reason": rep["reason"]} if rep.get("reason") else {})}
                      for node, (rep, m) in sorted(members.items())},
            "drain": {"maxUnavailable": limit,
                      "holders": sorted(lease["node"] for lease in leases if lease["pool"] == name)},
        }
        disruption = self._pending_disruption(st, current, target) if pending else None
        if disruption is not None:
            status["pendingDisruption"] = disruption
        status["conditions"] = self._conditions(counts, target, current, row)
        return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
                "metadata": dict(pool.get("metadata") or {}), "spec": spec, "status": status}

    @staticmethod
    def _conditions(counts: progress.Counts, target: str, current: str, row: Dict[str, Any]) -> List[Dict[str, str]]:
        updating = target != current or counts.updated < counts.machine
        return [
            {"type": "Updated", "status": "False" if updating else "True"},
            {"type": "Updating", "status": "True" if updating else "False"},
            {"type": "Degraded", "status": "True" if counts.degraded else "False"},
            {"type": "RenderHeld", "status": "True" if row.get("held") else "False",
             "message": row.get("held") or ""},
        ]

    def _pending_disruption(self, st: State, current: str, target: str) -> Optional[Dict[str, Any]]:
        """Actions a node on ``current`` takes to reach ``target`` (agent.disruption), if available."""
        if current == target:
            return {"from": current, "to": target, "actions": [{"type": "None"}], "reboot": False, "drain": False}
        try:
            from agent.disruption import merge_policy, plan_disruption
            from agent.nodeconfig import NodeConfig
        except ImportError:
            return None
        a, b = self.spec_of(current), self.spec_of(target)
        if a is None or b is None:
            return None

        def nc(spec: Dict[str, Any], name: str) -> NodeConfig:
            return NodeConfig(ignition=spec.get("config") or {}, os_image_url=spec.get("osImageURL", ""),
                              kernel_arguments=tuple(spec.get("kernelArguments") or ()),
                              kernel_type=spec.get("kernelType", ""), extensions=tuple(spec.get("extensions") or ()),
                              fips=bool(spec.get("fips")), name=name)
        try:
            policy = merge_policy(st.cluster_spec.get("nodeDisruptionPolicy"), source="machineconfiguration.yaml")
            plan = plan_disruption(nc(a, current), nc(b, target), policy)
        except Exception as exc:  # an optional view: never fail the pool object for it
            log.warning("pending disruption of %s -> %s not computed: %s", current, target, exc)
            return None
        out = plan.to_dict()
        out.pop("changes", None)  # the action list is the point; the full diff can be large
        return {"from": current, "to": target, **out}

    def cluster(self) -> Dict[str, Any]:
        st = self.state()
        warnings = [str(p) for p in st.problems]
        if st.stale:
            warnings.insert(0, "the state directory has invalid objects: the last good state keeps serving")
        return progress.cluster_progress(self.pool_views(), warnings)

    # -- serving configs -------------------------------------------------------------------------

    def served_config(self, pool_name: str, accept: Optional[str],
                      member: bool = False) -> Tuple[bytes, str, str, gating.Served]:
        """(body, etag, spec version, served) for a new node of ``pool_name`` or, with ``member``,
        for a node already in it (which gets the target). Cached per (pool, config, image, state,
        Accept), so a scale-up storm costs no re-rendering."""
        st = self.state()
        served = self._member_decision(st, pool_name) if member else self._served_decision(st, pool_name)
        key = (pool_name, served.config, served.image, st.signature, accept or "")
        with self._cache_lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                return hit[0], hit[1], hit[2], served
            # Single flight: in a storm, one thread renders and the others wait for its result.
            flight = self._flights.setdefault(key, threading.Lock())
        with flight:
            with self._cache_lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit[0], hit[1], hit[2], served
            try:
                return self._render_into_cache(key, pool_name, st, served, accept)
            finally:
                with self._cache_lock:
                    self._flights.pop(key, None)

    def _served_decision(self, st: State, pool_name: str) -> gating.Served:
        # Per thread (each has its own SQLite connection, and data_version is per connection):
        # recomputed only when the database or the state changed, not on every fetch of a storm.
        memo = getattr(self._local, "served", None)
        if memo is None:
            memo = self._local.served = {}
        key = (pool_name, st.signature, self.db.version())
        hit = memo.get(pool_name)
        if hit is not None and hit[0] == key:
            return hit[1]
        view = self.pool_views(only=pool_name, pending=False)[pool_name]
        served = gating.Served(**view["status"]["served"])
        memo[pool_name] = (key, served)
        return served

    def _member_decision(self, st: State, pool_name: str) -> gating.Served:
        target = self.pool_views(only=pool_name, pending=False)[pool_name]["spec"]["configuration"]["name"]
        return gating.for_member(pool_name, target, self._base_images(target), st.os_configs, st.os_builds)

    def prerender(self) -> None:
        """Fill the cache for every pool with the usual Accept headers (a worker starts warm)."""
        for name in self.state().pools:
            for accept in (None, "application/vnd.coreos.ignition+json;version=3.4.0, */*;q=0.1"):
                try:
                    self.served_config(name, accept)
                except Exception as exc:  # warming is an optimisation, never a failure
                    log.debug("prerender of %s failed: %s", name, exc)

    def _render_into_cache(self, key: Tuple, pool_name: str, st: State, served: gating.Served,
                           accept: Optional[str]) -> Tuple[bytes, str, str, gating.Served]:
        spec = self.spec_of(served.config) or {}
        doc = content.build_document(st.pools[pool_name], served.config, spec, served.image, st.cluster_spec)
        version, converted = content.negotiate(accept, doc)
        body = content.render_bytes(converted)
        etag = '"' + hashlib.sha256(body).hexdigest()[:40] + '"'
        with self._cache_lock:
            self._cache[key] = (body, etag, version)
            while len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
        return body, etag, version, served

    # -- reports and drains ------------------------------------------------------------------------

    def node_pool(self, node: str) -> Optional[progress.Membership]:
        rep = self.db.report(node)
        if rep is None:
            return None
        return progress.membership(rep, self.state().pools, self.pool_of_rendered)

    def record_report(self, node: str, body: Dict[str, Any]) -> Dict[str, Any]:
        st = self.state()
        member = progress.membership(body, st.pools, self.pool_of_rendered)
        released = False
        with self.db.write() as c:
            Database.put_report(c, node, member.pool, body)
            if body.get("state") == "Done":
                released = release_in(c, node, body.get("currentConfig", ""), "node reported Done")
        self.reconcile(force=True)
        out = {"node": node, "pool": member.pool, "membership": member.why, "accepted": True,
               "leaseReleased": released}
        if member.degraded:
            out["degradedReason"] = member.degraded
        return out

    def drain_limit(self, pool: str) -> int:
        st = self.state()
        members = self._members(st, self.db.reports()).get(pool, {})
        return parse_max_unavailable((st.pools[pool].get("spec") or {}).get("maxUnavailable"), len(members))


def now() -> float:
    return time.time()
