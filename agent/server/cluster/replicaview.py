"""What this process serves and how its store is, for /healthz, /api/v1/cluster and ``status``:
the part of ``service.Cluster`` that speaks for the replica (a mixin, as ``approval.Approval``)."""

import os
import time
from typing import Any, Dict, List, Optional

from agent.server.rollout import progress, skewpolicy
from agent.server.store.stateformat import State


class ReplicaView:
    """Needs ``store`` (a NodeStore), ``watcher`` (an ObjectSource), ``store_error``,
    ``_heartbeat``, ``state()`` and ``pool_views()`` from the class it is mixed into."""

    replica_name = ""

    def store_health(self) -> Dict[str, Any]:
        """The store as this process sees it (for /healthz, /api/v1/cluster and status). An
        etcd alarm (NOSPACE: the database is full, every write is refused; CORRUPT) makes it
        unhealthy and is named (``alarms``; /healthz then answers 503)."""
        alarms = self.store.alarms()
        error = self.store_error or self.watcher.store_error
        if alarms:
            names = ", ".join(sorted({a["alarm"] for a in alarms}))
            error = (f"etcd alarm {names} raised: etcd refuses every write until an operator clears it "
                     f"(NOSPACE: compact, defragment, then 'etcdctl alarm disarm'; docs/security.md, "
                     f"\"Limits\")" + (f"; {error}" if error else ""))
        out: Dict[str, Any] = {"kind": self.store.kind, "healthy": not error}
        if alarms:
            out["alarms"] = alarms
        if error:
            out["error"] = error
        seen = self.store.last_seen()
        if seen:
            out["lastContactSecondsAgo"] = round(max(0.0, time.time() - seen), 1)
        return out

    def cluster(self) -> Dict[str, Any]:
        st = self.state()
        problems = [str(p) for p in st.problems]
        if st.stale:
            problems.insert(0, "the state directory has invalid objects: the last good state keeps serving")
        views = self.pool_views(pending=False, nodes=0)
        out = progress.cluster_progress(views, problems + validator_warnings(st), problems)  # warnings: as before
        out["upgradeable"] = skewpolicy.upgradeable(st.cluster_spec)  # boot image skew (agent.server.rollout.skewpolicy)
        out["store"] = self.store_health()
        listed = self.store.replicas()
        mine = [dict(self.replica_view(st, views), replica=self.replica_name, pid=os.getpid(), at=time.time())]
        out["replicas"] = [dict(r, at=progress.iso8601(r["at"])) if "at" in r else r
                           for r in (listed if listed is not None else mine)]
        return out

    def replica_view(self, st: Optional[State] = None, views: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """What this process serves: the state it renders from and each pool's configs."""
        st = st or self.state()
        views = self.pool_views(pending=False, nodes=0) if views is None else views
        return {"stateSignature": st.signature, "stale": st.stale, "store": self.store_health(),
                "pools": {name: {"target": v["spec"]["configuration"]["name"],
                                 "current": v["status"]["configuration"]["name"],
                                 "served": v["status"]["served"]["config"]} for name, v in views.items()}}

    def start_heartbeat(self, name: str) -> None:
        """On a shared store, announce this process's view every few seconds (/api/v1/cluster)."""
        self.replica_name = name
        if self._heartbeat is None:
            self._heartbeat = self.store.start_heartbeat(name, self.replica_view)

    def stop_heartbeat(self) -> None:
        """This process stops serving: its replica announcement goes at once, not a TTL later."""
        if self._heartbeat is not None:
            self._heartbeat.stop()


def validator_warnings(st: State) -> List[str]:
    """Each validator warning of an admitted object, named (``MachineConfig 50-infra:
    $.spec.config.storge: unused key storge``): /api/v1/cluster, ``status``, /healthz."""
    from agent.server.rollout.review import warning_text

    return [warning_text(key, p) for key in sorted(st.warnings) for p in st.warnings[key]]

