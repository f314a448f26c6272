"""The node controller's part of ``service.Cluster`` (a mixin): which node updates when, decided
in one place for every replica (the pool row's compare-and-swap: ``NodeStore.update_pool``) by the
pure rules of agent/server/rollout/targeting.py, and what follows from it: what a member is served
(its desired config, ``desired_for``), the admin's rollback, a drain deferred past a
PodDisruptionBudget, and who is told (``target_listeners``: the Kubernetes backend writes
desiredConfig, the taint and the SetDesiredConfig Event).

The pool's members: with ``--backend kubernetes`` its Node objects (kube_nodes.NodeTruth.members),
else the nodes the store counts in it (approved, reporting).
"""

import logging
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from agent.core.objectchecks import parse_max_unavailable
from agent.core.rolloutpolicy import rollout_policy
from agent.server.cluster import podblockers, poolview, renderreview
from agent.server.cluster.alertsource import PrometheusAlerts, gate_state
from agent.server.cluster.kube_pools import pool_update_events
from agent.server.cluster.members import MemberMemo, in_first_boot
from agent.server.cluster.poolqueue import Bell, PoolQueue, changed_nodes
from agent.server.cluster.sharedruns import SharedRuns
from agent.server.rollout import candidates, gating, nodestatus, progress, review, targeting
from agent.server.rollout.poolindex import PoolIndex
from agent.server.rollout.rollbackplan import RolloutNotPossible, rollback_plan
from agent.server.rollout.targeting import Member
from agent.server.rollout.windows import state as window_state
from agent.server.store.nodestore import NodeRecord, PoolRow
from agent.server.store.stateformat import State

log = logging.getLogger(__name__)

STEP_WAIT = 30.0  # seconds a node's fetch waits at most for the step of its own report (caught_up)
CAUGHT_UP = 1.0  # seconds after a report was received that a step began which surely saw it (caught_up)
WAITING_LOOKUPS = 200  # pending registrations looked at to tell whether any waits in an empty pool
_RUNS_LOCK = threading.Lock()


class RolloutControl:
    """Needs the Cluster's ``store``, ``node_truth``, ``state()``, ``_rendered``, ``_layered``, ``_counts``."""

    # (pool, event type, reason, message): the Kubernetes backend writes each as an Event on the pool
    pool_listeners: List[Callable[[str, str, str, str], None]]
    bell: Bell  # rung for the nodes a step of their pool retargeted: held fetches wait on it (poolqueue.py)
    # the time a pool's maintenance window is read at (windows.py); tests set their own clock
    clock: Callable[[], float] = staticmethod(time.time)
    alert_source: Optional[PrometheusAlerts] = None  # serve --prometheus-url: the pools' alert gates

    # -- members -------------------------------------------------------------------------------

    def pool_members(self, st: State, pool: str) -> List[Member]:
        """The pool's members as targeting reads them."""
        truth = getattr(self, "node_truth", None)
        if truth is not None and truth.ready():
            return truth.members(pool, st.pools)
        return self._members_memo().members(self.store, pool)

    def _members_memo(self) -> MemberMemo:
        with _RUNS_LOCK:
            return self.__dict__.setdefault("_member_memo", MemberMemo())

    def _file_members(self, st: State, pool: str, index: PoolIndex) -> Optional[List[Member]]:
        """Bring the pool's index up to date with its members: only those changed since its last
        step where the sources number their changes (members.MemberMemo.changes; with Node
        objects, kube_nodes.NodeTruth.member_changes), else the whole list (returned: what the
        step read). Each read takes its mark with the members: a view's read between cannot skip a change."""
        truth = getattr(self, "node_truth", None)
        kube = truth is not None and truth.ready()
        if kube:
            delta = truth.member_changes(pool, st.pools, index.cursor)
        else:
            memo = self._members_memo()
            delta = memo.changes(self.store, pool, index.cursor if isinstance(index.cursor, int) else None)
        if delta is not None:
            index.cursor = delta[0]
            index.apply(delta[1], delta[2])
            return None
        members, index.cursor = truth.read_members(pool, st.pools) if kube else memo.read(self.store, pool)
        index.sync(members)
        return members

    def members_seen(self, st: State, pool: str) -> List[Member]:
        """The pool's members for a view: those its last step in this process read while nothing
        was stored since (the store's generation, and the Node cache's with Node objects, as
        they were before that read), else read now. So a view between reports costs no read,
        and never shows members older than the counts beside them."""
        seen = self.__dict__.get("_members_seen", {}).get(pool)
        if seen is not None and seen[0] is not None and seen[0] == self._members_generation():
            return seen[1]
        return self.pool_members(st, pool)

    def _members_generation(self) -> Any:
        """What moves when a member could have changed; None: not known (read them again)."""
        gen = self.store.generation()
        truth = getattr(self, "node_truth", None)
        if gen is None or truth is None:
            return gen
        return gen, truth.node_cache.changes

    def _waiting_members(self, pool: str) -> bool:
        """Whether a node waiting for approval reported itself in ``pool`` (read only for a pool
        that counts no node: its current config then stays what new nodes get)."""
        for reg in self.store.registrations(True, "", WAITING_LOOKUPS):
            rec = self.store.node(reg.node)
            if rec is not None and rec.pool == pool:
                return True
        return False

    # -- one sync of a pool -----------------------------------------------------------------------

    def _step_pool(self, st: State, name: str) -> None:
        """Move the pool's target/current (progress.rollout_step) and target its nodes
        (targeting.step), in one compare-and-swap of its row. Callers at the same time share one
        step (sharedruns.py: a burst of reports costs a few steps, not one each racing the others)."""
        with _RUNS_LOCK:
            runs = self.__dict__.setdefault("_pool_steps", SharedRuns())
        runs.run((name, st.signature), lambda: self._step_pool_now(st, name))

    def _step_pool_now(self, st: State, name: str) -> None:
        self.__dict__.setdefault("_step_began", {})[name] = time.time()  # before anything is read: caught_up
        if self._rendered.get(name) is None or st.pools.get(name) is None:
            return
        generation = self._members_generation()  # before the read: what it vouches for
        index_lock, index = self._pool_index(name)
        with index_lock:  # one step of the pool at a time files its members (poolindex.py)
            members = self._file_members(st, name, index)
            seen = self.__dict__.setdefault("_members_seen", {})
            if members is not None:
                seen[name] = (generation, members)
            else:  # read by changes: a view reads the memo's list (as cheap)
                seen.pop(name, None)
            self._decide_pool(st, name, index)

    def _decide_pool(self, st: State, name: str, index: PoolIndex) -> None:
        r, pool = self._rendered[name], st.pools[name]
        spec = pool.get("spec") or {}
        policy, now, seen = rollout_policy(pool), time.time(), {}
        failing = self.render_failure(st, name)
        refused = st.refused_pools().get(name)  # the pool itself is invalid: nobody in it is targeted
        invalid = f"the pool is invalid: {refused[0]}" if refused else ""
        arbiter = candidates.arbiter_hold(name, self._partner_unavailable(st, name))
        outside, window = window_state(pool, self.clock())  # ours: the pool's maintenance window
        blocking = podblockers.read(self, pool)  # ours: its blocking pods (one list of pods, off any request)
        alerting, alerts = gate_state(pool, self.alert_source)  # ours: the pool's alert gate (never waits on it)

        def decide(row: Optional[PoolRow]) -> Optional[PoolRow]:
            rendered = r.name
            if row is not None and failing:
                # A target moves only when the pool can be rendered (render_controller.go fails the
                # pool's sync: renderstatus.py): an invalid object it reads, an empty or invalid
                # file, or a process started on a directory holding one, never rewrites it. The
                # rollout goes on towards what the pool rendered from its last good state.
                rendered = row.rendered or row.target
            elif row is None and failing:
                return None  # no first target either
            counts = self._counts(st, name, row.target if row else rendered)
            waiting = row is not None and counts.machine == 0 and self._waiting_members(name)
            step = progress.rollout_step(rendered, row.as_dict() if row else None, counts, waiting)
            rollout = dict(row.rollout) if row else {}
            step = renderreview.gate(self, st, name, policy, row, step, rendered, rollout, now)  # ours: require-ack
            if step.unpin:
                rollout.pop("pinned", None)
            image, image_why = gating.layered_image_info(name, step.target, st.os_configs, st.os_builds)
            hold = invalid or targeting.hold_reason(step.target, bool(spec.get("paused")), gating.os_config_for_pool(
                name, st.os_configs) is not None, image, image_why) or arbiter or outside or blocking.hold \
                or alerting
            limit = candidates.arbiter_limits(name, list(st.pools), parse_max_unavailable(spec.get("maxUnavailable"),
                                                                                          len(index.members)))
            decision = targeting.step(None, rollout, step.target, image, limit, policy, hold, now, blocking.nodes,
                                      index)
            decision.rollout.pop("window", None)
            if window is not None:
                decision.rollout["window"] = window
            podblockers.attach(decision.rollout, blocking, decision.blocked)
            decision.rollout.pop("alerts", None)
            if alerts is not None:
                decision.rollout["alerts"] = alerts
            conds = poolview.conditions(counts, step.target, step.current, {"held": step.held, "rendered": rendered},
                                        None, failing, bool(spec.get("paused")), name)
            conds.append(review.warnings_condition(renderreview.pool_warnings(self, st, name), rendered))
            new = PoolRow(name, step.target, step.current, step.held, rendered,
                          poolview.condition_times(decision.rollout, conds, now))
            seen["step"] = (row, new, decision, image)
            if new == row:
                return None
            if row is None or (step.target, step.current) != (row.target, row.current):
                log.info("pool %s: target %s, current %s%s", name, step.target, step.current,
                         f" ({step.held})" if step.held else "")
            return new

        stored = self.store.update_pool(name, decide)
        old, new, decision, image = seen.get("step", (None, None, None, None))
        if new is None or stored is not new:
            return
        self.bell.ring(changed_nodes(old, new))  # their held fetches look again (poolqueue.py)
        # this process wrote it: it tells (ours: a rendering's review; status.go syncStatusOnly's Events,
        # then setDesiredAnnotations')
        renderreview.announce(self, st, name, old, new)
        for reason, message in pool_update_events(name, (old.target, old.current) if old else None,
                                                  (new.target, new.current), image):
            self.pool_event(name, "Normal", reason, message)
        if decision.targeted:
            self._announce(name, decision.targeted, new.target, image)
        if decision.retried:  # ours: a failed node let retry in a free slot (failure budget)
            log.info("pool %s: %s may retry %s in a free slot (failure budget)", name, ", ".join(decision.retried),
                     new.target)

    def _pool_index(self, pool: str) -> Tuple[threading.Lock, PoolIndex]:
        """The pool's members filed by its steps in this process (poolindex.py): a step files again
        only the members and entries that changed since the last one."""
        with _RUNS_LOCK:
            return self.__dict__.setdefault("_pool_indexes", {}).setdefault(pool, (threading.Lock(), PoolIndex()))

    def _partner_unavailable(self, st: State, pool: str) -> List[str]:
        """The unavailable Nodes of the pool that master and the arbiter pool hold each other to
        (candidates.arbiter_hold); none outside a cluster with both pools."""
        partner = {candidates.MASTER_POOL: candidates.ARBITER_POOL,
                   candidates.ARBITER_POOL: candidates.MASTER_POOL}.get(pool)
        if partner is None or partner not in st.pools or pool not in st.pools:
            return []
        row = self.store.pools().get(partner)
        rollout = row.rollout if row is not None else {}
        return [m.name for m in self.pool_members(st, partner)
                if nodestatus.is_unavailable_for_update(m.not_ready, targeting.effective(m, targeting.entry_of(rollout, m.name)))]

    def _announce(self, pool: str, nodes: List[str], config: str, image: Optional[str]) -> None:
        """node_controller.go ``setDesiredAnnotations``' Event: SetDesiredConfig (layered:
        SetDesiredConfigAndOSImage), "Targeted node X to MachineConfig: Y" for one node, "Set target
        for N nodes to ..." for more, its ``updateName`` ("MachineConfig: Y / Image: Z")."""
        line = f"MachineConfig: {config}" + (f" / Image: {image}" if image else "")
        reason = "SetDesiredConfigAndOSImage" if image else "SetDesiredConfig"
        message = f"Targeted node {nodes[0]} to {line}" if len(nodes) == 1 else f"Set target for {len(nodes)} nodes to {line}"
        log.info("pool %s: %s (%s)", pool, message, ", ".join(nodes))
        self.pool_event(pool, "Normal", reason, message)

    def pool_event(self, pool: str, kind: str, reason: str, message: str) -> None:
        for listener in self.pool_listeners:
            try:
                listener(pool, kind, reason, message)
            except Exception:  # a notice: the decision is stored, and the pool's status says it too
                log.exception("pool %s: telling %s", pool, reason)

    def start_stepper(self, interval: Optional[float] = 1.0) -> None:
        """Step the pools on this process's queue thread (poolqueue.py): each pool a report, an
        approval or a deletion changed (``wake_pools``), and every pool every ``interval`` seconds
        (None: the Kubernetes backend's sync loop does that), so that what no report announces
        moves the rollout: a canary's wait running out. It ends with ``stop_stepper``, or once
        nothing else holds this object."""
        self._stepper = PoolQueue(self, interval, self.bell).start()

    def stop_stepper(self, timeout: float = 10.0) -> None:
        """Stop stepping the pools; a step under way ends first (at most ``timeout`` seconds)."""
        stepper = getattr(self, "_stepper", None)
        if stepper is not None:
            stepper.stop(timeout)
        if self.alert_source is not None:  # no step asks any more
            self.alert_source.close()

    def wake_pools(self, pools: Iterable[Optional[str]]) -> int:
        """Have ``pools`` stepped off the caller's path (their counters moved); a ticket for
        ``pools_stepped``. Without a queue thread (a one-shot command, a test's bare Cluster) they
        are stepped now."""
        names = sorted({p for p in pools if p})
        stepper = getattr(self, "_stepper", None)
        if stepper is not None and stepper.alive():
            return stepper.add(names)
        st = self.state()
        for name in names:
            self._step_pool(st, name)
        return 0

    def pools_stepped(self, ticket: int = -1, timeout: float = STEP_WAIT) -> bool:
        """Wait (at most ``timeout``) until the steps queued with ``ticket`` (-1: everything
        queued so far) are over; whether they are."""
        stepper = getattr(self, "_stepper", None)
        if stepper is None or not stepper.alive() or ticket == 0:
            return True
        return stepper.wait_stepped(stepper.added() if ticket < 0 else ticket, timeout)

    def caught_up(self, rec: NodeRecord) -> bool:
        """Read your writes: a node that fetches just after it reported (to this process or to
        another) is answered after a step of its pool by this process that began once that report
        was stored, so it reads the turn its own report gave it. Whether it waited for one (then
        read its record again). ``CAUGHT_UP``: a step that began so long after the report was
        received saw it committed (``received`` is taken before the commit; another replica's
        clock may differ by as much)."""
        stepper = getattr(self, "_stepper", None)
        began = self.__dict__.get("_step_began", {}).get(rec.pool, 0.0)
        if stepper is None or not stepper.alive() or not rec.pool or began > rec.received + CAUGHT_UP:
            return False
        return self.pools_stepped(self.wake_pools((rec.pool,)))

    def step_queued(self, pools: Iterable[str], everything: bool) -> None:
        """The queue thread's step: ``pools``, or every pool."""
        if everything:
            self.step_pools()
            return
        st = self.state()
        for name in sorted(pools):
            if name in self._rendered:
                self._step_pool(st, name)

    def drain_target_refusal(self, node: str, pool: str, config: str) -> str:
        """Why ``node`` may not drain for ``config`` ("" when it may): only for the config the server
        targeted it to (its desired config); a node not targeted never needs a drain."""
        row = self.store.pools().get(pool)
        rec = self.store.node(node)
        if row is None or rec is None or not config:
            return ""
        desired = targeting.desired_of(rec.report, targeting.entry_of(row.rollout, node))[0]
        if desired == config:
            return ""
        return (f"node {node} is not targeted to {config}: its desired config is {desired or 'none'} (the server "
                f"targets the nodes of pool {pool} in turn, maxUnavailable at a time, and retargets a node that has "
                f"not started when the pool's target changes); fetch /config/{pool} for yours")

    # -- what a member gets ------------------------------------------------------------------------

    def desired_for(self, rec: Optional[NodeRecord], row: PoolRow,
                    pool_image: Optional[str] = None) -> Tuple[str, Optional[str], str, str]:
        """(config, image or None, rollout state, why) of a member fetching its config: the config
        the server targeted for it, with the image targeted (None: the config's own, layered or
        base). A node not targeted desires what it reports (a config this server knows, else the
        pool's current one); it is "waiting" unless that is the pool's target (and, on a layered
        pool, it runs the pool's image ``pool_image``), and then it is served the image it runs,
        for information only: node-agent applies nothing while it waits."""
        node = rec.node if rec is not None else ""
        report = rec.report if rec is not None else {}
        if rec is not None and in_first_boot(rec):  # no member of the pool yet: its first boot gets the target
            return row.target, None, "updating", "its first boot is not done: it gets the pool's target"
        entry = targeting.entry_of(row.rollout, node)
        config = targeting.desired_of(report, entry)[0]
        if not config or self.spec_of(config) is None:
            config = row.current
        if entry is not None and entry.get("deferred"):
            return config, None, "deferred", str(entry["deferred"].get("why") or "")
        if entry is not None and entry.get("parked"):  # ours: a failed node retries only in a free slot
            running = str(report.get("currentConfig") or "")
            return (running if self.spec_of(running) is not None else row.current), \
                str(report.get("currentImage") or "") or None, "waiting", \
                (f"it failed on {config}; it retries once the pool gives it a free slot (the failure budget lets "
                 f"the rollout go on past failed nodes, which then hold no slot): {row.rollout.get('halted') or ''}"
                 ).rstrip(": ")
        on_target = config == row.target and (not pool_image or report.get("currentImage") == pool_image)
        if entry is not None or on_target:
            image = entry.get("image") if entry else None
            # Done as upstream's IsDone: on the desired config and, targeted to a layered image, on it too
            done = report.get("state") == "Done" and report.get("currentConfig") == config and \
                (not image or report.get("currentImage") == image)
            later = "" if config == row.target else f" (an earlier target: the pool's is now {row.target})"
            return config, image, "done" if done else "updating", "" if done else f"targeted to {config}{later}"
        if report.get("state") != "Done":  # its own update or reboot is not over: the server waits for it
            why = f"it is not Done on {report.get('currentConfig') or config} yet ({report.get('state') or 'no report'}" + \
                (f": {report['reason']}" if report.get("reason") else "") + "); a node is targeted once it is"
        else:
            why = str(row.rollout.get("halted") or row.rollout.get("waiting") or "")
        running = str(report.get("currentImage") or "") or None
        return config, running, "waiting", (f"waiting for its turn to update to {row.target}" + (f": {why}" if why else ""))

    # -- the admin's rollback, a deferred drain ------------------------------------------------

    def rollback(self, pool: str, dry_run: bool = False, undo: bool = False) -> Dict[str, Any]:
        """Target the last config every member was Done on (the pool's current, or before a
        complete rollout the one before it) and hold the rendering rolled back from until the
        MachineConfigs change; ``undo`` lifts that hold. What it does is answered either way."""
        st = self.state()
        row = self.store.pools().get(pool)
        if pool not in st.pools or row is None:
            raise RolloutNotPossible(f"unknown pool {pool!r}")
        plan = rollback_plan(row, self.store.history(pool), undo)
        members = self.pool_members(st, pool)
        plan["nodes"] = sorted(m.name for m in members
                               if targeting.desired_of(m.report, targeting.entry_of(row.rollout, m.name))[0]
                               != plan["to"])
        plan["dryRun"] = dry_run
        if dry_run:
            return plan

        def decide(old: Optional[PoolRow]) -> Optional[PoolRow]:
            if old is None:
                return None
            rollout = dict(old.rollout)
            if undo:
                rollout.pop("pinned", None)
            else:
                rollout["pinned"] = {"config": plan["to"], "from": plan["from"], "at": time.time(), "by": "admin"}
            return PoolRow(old.name, old.target, old.current, old.held, old.rendered, rollout)

        self.store.update_pool(pool, decide)
        log.warning("pool %s: %s", pool, plan["summary"])
        self._step_pool(st, pool)
        return plan

    def defer_node(self, node: str, pool: str, why: str) -> None:
        """Ours: the node gives its slot back and keeps the config it runs; it is tried again once
        every other node of the pool is done (targeting.defer)."""
        rec = self.store.node(node)
        current = str((rec.report if rec is not None else {}).get("currentConfig") or "")

        def decide(old: Optional[PoolRow]) -> Optional[PoolRow]:
            if old is None or not current:
                return None
            rollout = targeting.defer(old.rollout, node, current, why, time.time())
            return PoolRow(old.name, old.target, old.current, old.held, old.rendered, rollout)

        self.store.update_pool(pool, decide)
        log.warning("pool %s: node %s deferred (%s); it keeps %s and is tried again once the others are done",
                    pool, node, why, current)
