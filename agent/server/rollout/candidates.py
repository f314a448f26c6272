"""Which Nodes of a pool may be targeted now (pure): the MCO node controller's candidate rules at
the anchor's commit (openshift/machine-config-operator 7ff337a4), each named after the upstream
function it mirrors:

- ``check_node_candidacy_for_update``: pkg/controller/common/layered_node_state.go
  ``CheckNodeCandidacyForUpdate`` (with ``IsDesiredEqualToBuild`` and
  ``IsDesiredMachineConfigEqualToPool``);
- ``get_all_candidate_machines``: pkg/controller/node/node_controller.go
  ``getAllCandidateMachines`` (capacity, the failing Nodes that take it, the not-ready candidates
  skipped);
- ``sort_node_list``: node_controller.go ``sortNodeList``;
- ``needs_update_in_progress_taint``: node_controller.go ``syncMachineConfigPool``'s taint loop;
- ``arbiter_hold`` and ``ARBITER_MAX_UNAVAILABLE``: the HighlyAvailableArbiter rules of
  node_controller.go (the arbiter pool follows master's coordination).

Ours, each named so: only Nodes node-agent reports for are candidates (``Member.ours``), a
failed node under a failure budget holds a slot only while it is let retry (``retrying``), and a
candidate running a blocking pod is skipped (``blocked``: agent/server/rollout/blockingpods.py).

A node's report here is what upstream's rules read on its Node: desiredConfig and desiredImage the
server's decision (targeting.effective), current config, image and state the node's own.
"""

from dataclasses import dataclass, field
from typing import Any, Collection, List, Mapping, Optional, Sequence, Tuple

from agent.server.rollout import nodestatus

ZONE_LABEL = "topology.kubernetes.io/zone"  # node_controller.go zoneLabel
TAINT_KEY = "UpdateInProgress"  # pkg/constants NodeUpdateInProgressTaint: key UpdateInProgress,
TAINT_EFFECT = "PreferNoSchedule"  # effect PreferNoSchedule
ARBITER_POOL = "arbiter"  # ctrlcommon.MachineConfigPoolArbiter: exists only in HighlyAvailableArbiter clusters
MASTER_POOL = "master"
ARBITER_MAX_UNAVAILABLE = 1  # upstream forces the arbiter pool's maxUnavailable to 1


@dataclass(frozen=True)
class Member:
    """One Node of the pool as targeting reads it. ``report``: what node-agent reported (or, for a
    Node without one, its MCD annotations: ``ours`` False); ``not_ready``: check_node_ready's
    reason ("" when ready); ``created``: the Node's creationTimestamp (or, without Node objects,
    when the node registered), Unix seconds."""
    name: str
    report: Optional[Mapping[str, Any]]
    ours: bool = True
    not_ready: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    created: float = 0.0


@dataclass(frozen=True)
class Candidates:
    nodes: List[Member]
    capacity: int
    unavailable: List[str]
    failing: List[str]  # not candidates (desiring the target) and failing on it
    room: int = 0  # maxUnavailable less the unavailable Nodes, before the failing ones take theirs
    not_ready: List[str] = field(default_factory=list)  # candidates skipped: not ready (cordoned, NotReady)
    blocked: List[str] = field(default_factory=list)  # ours: candidates skipped for their blocking pods


def is_desired_equal_to_pool(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """layered_node_state.go ``IsDesiredMachineConfigEqualToPool`` and, on a layered pool (``image``),
    ``IsDesiredEqualToBuild``: the desired config is the pool's (the build's MachineConfig) and the
    desired image the MachineOSConfig's."""
    if not report or str(report.get("desiredConfig") or "") != target:
        return False
    return not image or report.get("desiredImage") == image


def check_node_candidacy_for_update(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """layered_node_state.go ``CheckNodeCandidacyForUpdate``. Layered (``image`` set): a candidate
    unless its desired config and desired image are the build's. Not layered: not a candidate once
    it desires the pool's config, except while a desiredImage is still there (upstream: "rollback
    update is needed", a node opted out of layering, paced as any update)."""
    if image:
        return not is_desired_equal_to_pool(report, target, image)
    if is_desired_equal_to_pool(report, target, None):
        return bool((report or {}).get("desiredImage"))
    return True


def needs_update_in_progress_taint(report: Optional[Mapping[str, Any]], target: str, image: Optional[str]) -> bool:
    """syncMachineConfigPool's taint loop: the UpdateInProgress:PreferNoSchedule taint while the Node
    does not desire the pool's config (layered: the build's config and image; not layered: the
    pool's config and no image annotations left), removed once it does. A paused pool's taints are
    left as they are (the loop is never reached)."""
    if image:
        return not is_desired_equal_to_pool(report, target, image)
    rep = report or {}
    images = bool(rep.get("desiredImage")) and bool(rep.get("currentImage"))  # AreImageAnnotationsPresentOnNode
    return not is_desired_equal_to_pool(report, target, None) or images


def get_all_candidate_machines(members: Sequence[Member], effective: Mapping[str, Optional[Mapping[str, Any]]],
                               target: str, image: Optional[str], max_unavailable: int,
                               retrying: Sequence[str] = (), blocked: Collection[str] = ()) -> Candidates:
    """node_controller.go ``getAllCandidateMachines``: capacity is maxUnavailable less the unavailable
    Nodes (``IsUnavailableForUpdate``); a Node that is no candidate (``CheckNodeCandidacyForUpdate``)
    and failing (``IsNodeMCDFailing``) takes capacity too ("if the issue clears we don't want
    multiple to update at once"); a candidate that is not ready (``IsNodeReady``: cordoned, NotReady,
    DiskPressure, NetworkUnavailable) is skipped. ``effective``: each member's report as its Node
    reads (name -> report). Ours: only members node-agent reports for are candidates; under a
    failure budget the caller names in ``retrying`` the failed nodes let retry, each holding a slot
    (the others hold none: ``Candidates.room`` is then the capacity); a candidate named in
    ``blocked`` (a blocking pod runs on it) is skipped as a not-ready one is, but holds no slot:
    it is available, only not to be disturbed now."""
    unavailable, failing, nodes, skipped, held, waits = [], [], [], [], [], []
    for m in members:
        eff = effective.get(m.name)
        if nodestatus.is_unavailable_for_update(m.not_ready, eff):
            unavailable.append(m.name)
        elif m.name in retrying:
            held.append(m.name)
        if not check_node_candidacy_for_update(eff, target, image):
            if nodestatus.is_mcd_failing(eff):
                failing.append(m.name)
            continue
        if m.not_ready:
            skipped.append(m.name)
            continue
        if m.ours and m.name in blocked:
            waits.append(m.name)
        elif m.ours:
            nodes.append(m)
    room = max(0, max_unavailable - len(unavailable) - len(held))
    return Candidates(nodes, max(0, room - len(failing)), unavailable, failing, room, skipped, waits)


def sort_node_list(members: Sequence[Member]) -> List[Member]:
    """node_controller.go ``sortNodeList``: Nodes with the zone label first, by zone, then oldest
    first; Nodes without it last, oldest first (the name breaks ties: ours, so the order is total)."""
    def key(m: Member) -> Tuple:
        zone = m.labels.get(ZONE_LABEL)
        return (0, zone, m.created, m.name) if zone is not None else (1, "", m.created, m.name)
    return sorted(members, key=key)


def arbiter_limits(pool: str, pools: Sequence[str], max_unavailable: int) -> int:
    """The arbiter pool's maxUnavailable is forced to 1 (upstream, HighlyAvailableArbiter)."""
    return ARBITER_MAX_UNAVAILABLE if pool == ARBITER_POOL and MASTER_POOL in pools else max_unavailable


def arbiter_hold(pool: str, partner_unavailable: Sequence[str]) -> str:
    """Why a master or arbiter pool targets nobody now ("" when nothing holds): in a
    HighlyAvailableArbiter cluster (a pool named ``arbiter`` beside ``master``) the arbiter is not
    updated while any master Node is unavailable, and master not while an arbiter Node is (the two
    keep quorum together: node_controller.go counts master's unavailable Nodes for the arbiter)."""
    if pool not in (MASTER_POOL, ARBITER_POOL) or not partner_unavailable:
        return ""
    partner = ARBITER_POOL if pool == MASTER_POOL else MASTER_POOL
    names = ", ".join(partner_unavailable[:20])
    return (f"{partner} node(s) {names} are unavailable: {pool} is not updated while {partner} is "
            f"(the control plane and the arbiter keep quorum together, as upstream's arbiter rules)")
