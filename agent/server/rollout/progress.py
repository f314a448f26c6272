"""Pool membership, counts, rollout steps and cluster-wide progress (pure).

REFERENCE §3 (custom pools) and §6 (upgrades across pools): progress is judged over *all*
pools, each blocking pool is named with its reason, and a new target does not start while the
previous rollout of that pool is incomplete unless forced.
"""

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

from agent.server.rollout.render import selector_matches

ANN = "machineconfiguration.openshift.io/"
STATES = ("Done", "Working", "Degraded")


@dataclass(frozen=True)
class Membership:
    pool: str
    why: str
    degraded: str = ""  # non-empty: the node's pool is ambiguous (two custom pools)


@dataclass
class Counts:
    machine: int = 0
    updated: int = 0
    ready: int = 0
    degraded: int = 0
    refused: int = 0
    working: int = 0
    nodes: List[str] = field(default_factory=list)
    # From Node objects (--backend kubernetes, agent/server/rollout/nodestatus.py): the MCO's
    # unavailable count (None: machine - ready, the other backends' rule) and its NodeDegraded
    # message parts ('Node X is reporting: "..."').
    unavailable: Optional[int] = None
    degraded_reasons: List[str] = field(default_factory=list)
    unavailable_reasons: List[str] = field(default_factory=list)  # ours: "node X is reporting NotReady=Unknown"

    def to_status(self) -> Dict[str, int]:
        return {"machineCount": self.machine, "updatedMachineCount": self.updated,
                "readyMachineCount": self.ready, "degradedMachineCount": self.degraded,
                "unavailableMachineCount": self.machine - self.ready if self.unavailable is None else self.unavailable,
                "skewRefusedMachineCount": self.refused}


def _selects(pool: Dict[str, Any], labels: Dict[str, str]) -> bool:
    """Whether the pool's ``nodeSelector`` selects a node with ``labels``: the whole
    LabelSelector, ``matchExpressions`` too, as upstream's getPoolsForNode does
    (node_controller.go, ``selector.Matches(labels.Set(node.Labels))``). Matching
    ``matchLabels`` only left a pool selected by expressions with no node at all."""
    return selector_matches((pool.get("spec") or {}).get("nodeSelector"), labels)


def is_custom(name: str) -> bool:
    return name not in ("master", "worker")


SERVER_KEY = "_server"  # the server's own mark on a stored report (nodestore.SERVER_KEY)
ADMIN_APPROVED = ("admin", "upgrade")  # approvals that may put a node in the master pool


def membership(report: Dict[str, Any], pools: Dict[str, Dict[str, Any]],
               pool_of_rendered: Callable[[str], Optional[str]]) -> Membership:
    """Which pool a reporting node belongs to (``_membership``), checked against the server's
    own record of the node when the report carries it (``SERVER_KEY``, on a server that
    approves nodes: docs/security.md "Identity"):

    - the labels the admin vouched for at approval replace the reported ones;
    - only a node the admin approved may be in the master pool (as the NodeRestriction admission
      plugin keeps a kubelet from giving itself a node-role label): any other node claiming it
      by labels or by its ``pool`` is in no pool ("") and Degraded, so it holds none of the
      master pool's drain leases and counts in none of its numbers.
    """
    mark = report.get(SERVER_KEY)
    if not isinstance(mark, dict):
        return _membership(report, pools, pool_of_rendered)
    if isinstance(mark.get("labels"), dict):
        report = dict(report, labels=mark["labels"])
    m = _membership(report, pools, pool_of_rendered)
    if m.pool == "master" and mark.get("approvedBy") not in ADMIN_APPROVED:
        return Membership("", f"claims the master pool ({m.why})",
                          degraded="only a node the admin approved may join the master pool: approve it with "
                                   "`node-config-server approve node NAME` (the admin token: serve --admin-token-file)")
    if isinstance(mark.get("labels"), dict):
        return Membership(m.pool, f"{m.why}; labels as approved by the admin", m.degraded)
    return m


def _membership(report: Dict[str, Any], pools: Dict[str, Dict[str, Any]],
                pool_of_rendered: Callable[[str], Optional[str]]) -> Membership:
    """Which pool a reporting node belongs to. Precedence: master > custom > worker.

    - A node whose served ``firstPivotConfig`` is a custom pool's config belongs to it at once
      (the upstream MCO-650 fix: it must never be handed the worker config).
    - With ``labels`` in the report: pools whose ``nodeSelector`` selects them; master wins,
      then the one custom pool; two custom pools is an error (Degraded, with the reason).
    - Otherwise the pool the node says.
    """
    said = str(report.get("pool") or "")
    labels = report.get("labels") if isinstance(report.get("labels"), dict) else None
    matched: List[str] = []
    if labels is not None:
        labels = {str(k): str(v) for k, v in labels.items()}
        for name in sorted(pools):
            if _selects(pools[name], labels):
                matched.append(name)
    if "master" in matched:
        return Membership("master", "labels match the master pool (master wins)")
    customs = [p for p in matched if is_custom(p)]
    if len(customs) > 1:
        return Membership(said or customs[0], "labels match several custom pools",
                          degraded=f"node matches more than one custom pool ({', '.join(customs)}); "
                                   f"a node may belong to one custom pool only: fix its labels or the pools' "
                                   f"nodeSelector")
    pivot = str(report.get("firstPivotConfig") or "")
    pivot_pool = pool_of_rendered(pivot) if pivot else None
    if pivot_pool and is_custom(pivot_pool) and pivot_pool in pools:
        return Membership(pivot_pool, f"first booted into {pivot} of custom pool {pivot_pool}")
    if customs:
        return Membership(customs[0], f"labels match custom pool {customs[0]} (custom wins over worker)")
    if said and is_custom(said) and said in pools:
        return Membership(said, "reported pool")
    if matched:
        return Membership(matched[0], "labels match")
    return Membership(said, "reported pool")


def is_updated(report: Dict[str, Any], target: str, image: Optional[str]) -> bool:
    """Whether the node runs ``target`` (and ``image``): Done on it, as upstream's isNodeDone.
    A node still Working on it (a reboot pending) does not run it yet, so it proves nothing to
    new nodes (gating) and does not count as updated."""
    if report.get("currentConfig") != target or report.get("state") != "Done":
        return False
    return image is None or report.get("currentImage") == image


def count(members: Dict[str, Tuple[Dict[str, Any], Membership]], target: str, image: Optional[str]) -> Counts:
    c = Counts()
    for node in sorted(members):
        report, member = members[node]
        c.machine += 1
        c.nodes.append(node)
        updated = is_updated(report, target, image)
        if updated:
            c.updated += 1
            if report.get("state") == "Done" and not member.degraded:
                c.ready += 1
        if report.get("state") == "Degraded" or member.degraded:
            c.degraded += 1
        if report.get("state") == "Working":
            c.working += 1
        if report.get("skew") == "refuse":
            c.refused += 1
    return c


def epoch_of(at: Any) -> Optional[float]:
    """Epoch seconds from epoch seconds, an ISO 8601 string or a datetime (naive: UTC, as YAML
    reads an unquoted time); None for anything else. Old stores kept floats, newer ones text."""
    import datetime

    if isinstance(at, str):
        try:
            return datetime.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    if isinstance(at, datetime.datetime):
        return (at if at.tzinfo else at.replace(tzinfo=datetime.timezone.utc)).timestamp()
    if not isinstance(at, (int, float)) or isinstance(at, bool):
        return None
    return float(at)


def iso8601(at: Any) -> str:
    """``2026-11-22T20:30:00Z`` from what ``epoch_of`` reads ("" for anything else)."""
    import datetime

    epoch = epoch_of(at)
    if epoch is None:
        return ""
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _changed(history: List[Dict[str, Any]], field_name: str) -> str:
    """When ``field_name`` (target or current) last changed, from the pool history ("" unknown)."""
    times = [h.get("at") for h in history if h.get("field") == field_name]
    return iso8601(times[-1]) if times else ""


def conditions(counts: Counts, target: str, current: str, held: str,
               history: Optional[List[Dict[str, Any]]] = None, render_problem: str = "",
               paused_for: str = "") -> List[Dict[str, str]]:
    """The pool's conditions as the MCO writes them: type, status, reason, message and
    lastTransitionTime. Updated and Updating change with the pool's target and current, whose
    changes the pool history records: their lastTransitionTime is when that happened, the same
    while the status stays. The others are not recorded there, so they carry no time rather
    than a made-up one (nor do any without a history).

    As the MCO's node controller (pkg/controller/node/status.go, calculateStatus): NodeDegraded
    when any node is degraded (reason "%d nodes are reporting degraded status on sync", message
    the nodes' reasons), RenderDegraded when the pool cannot be rendered (``render_problem``: the
    whole message, render_controller.go ``syncFailingStatus``'s, reason ""), and Degraded =
    NodeDegraded or RenderDegraded, reason "" and NodeDegraded's message (none for a render
    failure alone), as calculateStatus sets it.

    Updated needs every node updated and ready and none unavailable (calculateStatus's
    ``allUpdated``); a paused pool (``paused_for``: the config it would update to, the rendered one
    waiting while it is paused) that is not, or that has a rendering waiting, shows Updated=False
    and Updating=False with "Pool is paused; will not update to MachineConfig ..." (upstream's
    words: upstream's target has moved to that rendering, ours waits in RenderHeld). NodeDegraded's reason is
    upstream's sentence and its message upstream's list (``Node X is reporting: "..."``) when the
    counts name the nodes (``degraded_reasons``: the Kubernetes backend)."""
    unavailable = counts.machine - counts.ready if counts.unavailable is None else counts.unavailable
    all_updated = counts.updated == counts.machine and counts.ready == counts.machine and unavailable == 0
    updating = target != current or not all_updated or bool(paused_for and paused_for != target)
    behind = f"{counts.updated} of {counts.machine} node(s) updated to {target}" + \
        (f" (current {current})" if target != current else "")
    waiting = _waiting_for(counts, unavailable) if target == current and counts.updated == counts.machine else ""
    sentence = f"{counts.degraded} nodes are reporting degraded status on sync"
    # From Node objects (``unavailable`` known) upstream's list, "" when no node says why; from the
    # node store (no reasons listed) where to read them
    listed = ", ".join(counts.degraded_reasons) if counts.degraded_reasons or counts.unavailable is not None else \
        "their reasons: status.nodes, `node-config-server get nodes`"
    stopped = bool(paused_for) and updating
    out = [
        {"type": "Updated", "status": "False" if updating else "True",
         "reason": "Updating" if updating else "AllNodesUpdated",
         "message": (behind + (f"; {waiting}" if waiting else "")) if updating else
         f"All nodes are updated with MachineConfig {target}"},
        {"type": "Updating", "status": "True" if updating and not stopped else "False",
         "reason": ("PoolPaused" if stopped else "RolloutInProgress") if updating else "AllNodesUpdated",
         "message": (f"Pool is paused; will not update to MachineConfig {paused_for}" if stopped else
                     f"All nodes are updated to MachineConfig {target}; {waiting}" if waiting else
                     f"All nodes are updating to MachineConfig {target}") if updating else ""},
        {"type": "NodeDegraded", "status": _bool(counts.degraded), "reason": sentence if counts.degraded else "",
         "message": listed if counts.degraded else ""},
        {"type": "RenderDegraded", "status": _bool(render_problem), "reason": "", "message": render_problem},
        {"type": "Degraded", "status": _bool(counts.degraded or render_problem), "reason": "",
         "message": listed if counts.degraded else ""},
        {"type": "RenderHeld", "status": _bool(held),
         "reason": "RolledBack" if held else "",
         "message": held},
    ]
    since = _changed(history or [], "target" if target != current else "current")
    if since:
        for c in out[:2]:
            c["lastTransitionTime"] = since
    return out


def _waiting_for(counts: Counts, unavailable: int) -> str:
    """Ours: what an updated pool still waits for, named (a NotReady Node: upstream then says "All
    nodes are updating to ...", which no node is; with "N of N updated" beside it that read as a
    contradiction). "" when nothing is named or counted."""
    left = max(unavailable, counts.machine - counts.ready)
    if not left:
        return ""
    named = "; ".join(counts.unavailable_reasons[:10]) + \
        (f" and {len(counts.unavailable_reasons) - 10} more" if len(counts.unavailable_reasons) > 10 else "")
    return f"waiting for {left} node(s) to be ready and available: " + \
        (named or "their state: status.nodes, `node-config-server get nodes`")


def _bool(value: Any) -> str:
    return "True" if value else "False"


@dataclass(frozen=True)
class Step:
    target: str
    current: str
    held: str  # why the rendered config is not the target (the admin's rollback), or ""
    unpin: bool = False  # the rollback's hold is over: a new rendering replaced the one rolled back from


def rollout_step(rendered: str, row: Optional[Dict[str, Any]], counts: Counts, waiting_members: bool = False) -> Step:
    """The pool's next (target, current). ``counts`` are against the stored target.

    - A brand-new pool: current = target = the rendered config.
    - current moves to target once every counted node of the pool is Done and Ready on it.
    - The target is the newest rendering at once, as the MCO's render controller moves
      ``spec.configuration`` whenever the MachineConfigs change (a deleted one included, and while
      the pool is paused): a revert is one step. Which nodes take it, and when, is the node
      targeting's decision (targeting.py), which nothing here bypasses.
    - Ours: after the admin's rollback (``rollout.pinned``) the rendering rolled back from stays
      held until a new rendering replaces it.
    - A pool with no counted node makes its new target current at once (nothing runs the old
      one), unless nodes wait for approval in it (``waiting_members``): then its current, what
      they run, stays what new nodes get until a counted node proves the new target (MCO-1940).
    """
    if row is None:
        return Step(rendered, rendered, "")
    target, current = row["target"], row["current"]
    if target != current and counts.ready == counts.machine and (counts.machine or not waiting_members):
        current = target
    pin = (row.get("rollout") or {}).get("pinned") or {}
    if pin and pin.get("from") == rendered:
        return Step(str(pin.get("config") or target), current,
                    f"rolled back by the admin at {iso8601(pin.get('at'))} from {rendered} to {pin.get('config')}: "
                    f"{rendered} waits until the MachineConfigs change (or node-config-server rollback pool "
                    f"{row.get('name', 'NAME')} --undo)")
    if rendered != target:
        target = rendered
        if counts.machine == 0 and not waiting_members:
            current = target
    return Step(target, current, "", unpin=bool(pin))


def pool_blocking(name: str, view: Dict[str, Any]) -> List[str]:
    """Reasons this pool keeps the cluster update from being complete (empty: the pool is done)."""
    status = view["status"]
    spec = view["spec"]
    reasons = []
    target, current = spec["configuration"]["name"], status["configuration"]["name"]
    if status.get("held"):
        reasons.append(status["held"] if not spec.get("paused") else f"paused: {status['held']}")
    elif spec.get("paused") and target != current:
        reasons.append(f"paused while updating to {target}")
    if (status.get("rollout") or {}).get("halted"):
        reasons.append(status["rollout"]["halted"])
    if status["degradedMachineCount"]:
        named = _condition(status, "NodeDegraded").get("message") or ""
        reasons.append(f"degraded: {status['degradedMachineCount']} node(s) degraded" + (f": {named}" if named else ""))
    render = _condition(status, "RenderDegraded")
    if render.get("status") == "True":  # an invalid object it reads: the target holds on its last good rendering
        reasons.append(f"degraded: {render.get('message') or 'the pool cannot be rendered'}")
    if status.get("skewRefusedMachineCount"):
        reasons.append(f"skew: {status['skewRefusedMachineCount']} node(s) refused by boot image skew rules")
    if target != current or status["updatedMachineCount"] < status["machineCount"] or \
            status["readyMachineCount"] < status["machineCount"]:
        reasons.append(f"updating: {status['readyMachineCount']} of {status['machineCount']} node(s) done on {target}")
        window = (status.get("rollout") or {}).get("window") or {}  # ours: why it does not move (windows.py)
        if window.get("invalid"):
            reasons.append(f"held: its maintenance window is invalid: {window['invalid']}")
        elif window.get("open") is False:
            reasons.append(f"held: outside its maintenance window ({window.get('schedule')}) until {window.get('opensAt')}")
        pods = (status.get("rollout") or {}).get("blockingPods") or {}  # ours: blockingpods.py
        if pods.get("invalid") or pods.get("unavailable"):
            reasons.append(f"held: its blocking-pod selector: {pods.get('invalid') or pods.get('unavailable')}")
        elif pods.get("waiting"):
            reasons.append(f"blocking pods: {pods['waiting']} node(s) wait while pods matching "
                           f"{pods.get('selector')!r} run on them ({', '.join(sorted(pods.get('nodes') or {}))})")
        alerts = (status.get("rollout") or {}).get("alerts") or {}  # ours: alertgate.py
        if alerts.get("holding"):
            reasons.append(f"held by its alert gate ({alerts.get('pattern') or 'invalid'}): " + (
                alerts.get("invalid") or alerts.get("unanswered") or f"{alerts.get('count')} alert(s) fire: "
                f"{', '.join(alerts.get('firing') or [])}"))
    return reasons


def _condition(status: Dict[str, Any], kind: str) -> Dict[str, Any]:
    for c in status.get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == kind:
            return c
    return {}


def cluster_progress(views: Dict[str, Dict[str, Any]], warnings: Optional[List[str]] = None,
                     problems: Optional[List[str]] = None) -> Dict[str, Any]:
    """Whether the cluster update is complete, and what blocks it: each pool's reasons
    (``pool_blocking``), and each of the state's ``problems`` (an object refused: what it says is
    not what is served). ``degraded``: a pool is degraded or the state has a problem, which
    ``status`` says first and exits non-zero for, as ``cloud-init status`` does for an error."""
    pools: Dict[str, Any] = {}
    blocking: List[Dict[str, str]] = []
    for name in sorted(views):
        view = views[name]
        reasons = pool_blocking(name, view)
        st = view["status"]
        pools[name] = {
            "complete": not reasons,
            "target": view["spec"]["configuration"]["name"],
            "current": st["configuration"]["name"],
            "rendered": st.get("rendered", ""),
            "paused": bool(view["spec"].get("paused")),
            "machineCount": st["machineCount"], "updatedMachineCount": st["updatedMachineCount"],
            "readyMachineCount": st["readyMachineCount"], "degradedMachineCount": st["degradedMachineCount"],
            "skewRefusedMachineCount": st.get("skewRefusedMachineCount", 0),
        }
        blocking.extend({"pool": name, "reason": r} for r in reasons)
    said = " ".join(b["reason"] for b in blocking)  # a problem a pool's RenderDegraded names already: once
    blocking.extend({"pool": "", "reason": f"state: {p}"} for p in problems or [] if p not in said)
    degraded = sorted({b["pool"] or "state" for b in blocking
                       if b["reason"].startswith(("degraded:", "state:"))})
    out: Dict[str, Any] = {"complete": not blocking and bool(pools), "pools": pools, "blocking": blocking,
                           "degraded": degraded}
    if not pools:
        out["blocking"] = [{"pool": "", "reason": "no pools defined"}]
    if warnings:
        out["warnings"] = list(warnings)
    return out
