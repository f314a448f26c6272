"""The server's targeting against the MCO node controller at the anchor's commit (openshift/
machine-config-operator 7ff337a4): a layered pool finishes, a paused pool is frozen, a not-ready
node is skipped, a failure budget never lets more than maxUnavailable nodes go, and, over random
pools, ``targeting.step`` picks what a re-statement of upstream's ``getAllCandidateMachines`` +
``sortNodeList`` (below, written from node_controller.go and layered_node_state.go) picks."""

from typing import Dict, List, Optional

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.objectchecks import parse_max_unavailable
from agent.core.rolloutpolicy import RolloutPolicy
from agent.server.rollout import candidates, rolloutstatus, targeting
from agent.server.rollout.targeting import Member

A, B, C = "rendered-worker-a", "rendered-worker-b", "rendered-worker-c"
IMG_A, IMG_B = "registry.example.com/os@sha256:aaaa", "registry.example.com/os@sha256:bbbb"
UPSTREAM = RolloutPolicy()
CORDONED = "node w0 is reporting Unschedulable"


def done(config, image=None):
    rep = {"state": "Done", "currentConfig": config, "desiredConfig": config}
    if image:
        rep.update(currentImage=image, desiredImage=image)
    return rep


def fleet(n, report=None):
    return [Member(f"w{i}", dict(report or done(A)), created=float(i)) for i in range(n)]


def replace(members, **reports):
    return [Member(m.name, reports.get(m.name, m.report), m.ours, m.not_ready, m.labels, m.created) for m in members]


# -- the cases of issue 52 ---------------------------------------------------------------------------

def test_a_layered_rollout_targets_every_node_one_at_a_time_and_a_done_node_is_never_a_candidate_again():
    nodes, rollout, order = fleet(3, done(A, IMG_A)), {}, []
    for now in range(1, 4):
        got = targeting.step(nodes, rollout, B, IMG_B, 1, UPSTREAM, "", float(now))
        assert len(got.targeted) == 1 and got.rollout["targets"][got.targeted[0]]["image"] == IMG_B
        order += got.targeted
        # the node applies B with the image and reports Done, naming the image it was targeted to
        nodes, rollout = replace(nodes, **{got.targeted[0]: done(B, IMG_B)}), got.rollout
    assert order == ["w0", "w1", "w2"]
    last = targeting.step(nodes, rollout, B, IMG_B, 1, UPSTREAM, "", 9.0)
    assert last.targeted == [] and last.rollout["targets"] == {} and not last.waiting


def test_a_done_layered_node_that_reports_no_desired_image_keeps_its_entry_and_is_not_targeted_again():
    nodes = fleet(3, done(A, IMG_A))
    first = targeting.step(nodes, {}, B, IMG_B, 1, UPSTREAM, "", 1.0)
    assert first.targeted == ["w0"]
    without = {"state": "Done", "currentConfig": B, "desiredConfig": B, "currentImage": IMG_B}
    nxt = targeting.step(replace(nodes, w0=without), first.rollout, B, IMG_B, 1, UPSTREAM, "", 2.0)
    assert nxt.targeted == ["w1"] and nxt.rollout["targets"]["w0"]["image"] == IMG_B  # the entry is its annotation


def test_a_non_layered_node_with_a_stale_desired_image_is_a_candidate_a_rollback_update():
    stale = {"state": "Done", "currentConfig": B, "desiredConfig": B, "currentImage": IMG_B, "desiredImage": IMG_B}
    nodes = replace(fleet(2, done(B)), w1=stale)
    assert candidates.check_node_candidacy_for_update(stale, B, None)
    assert not candidates.check_node_candidacy_for_update(done(B), B, None)
    got = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 1.0)
    assert got.targeted == ["w1"] and "image" not in got.rollout["targets"]["w1"]
    assert candidates.needs_update_in_progress_taint(stale, B, None)


def test_a_paused_pool_moves_no_node_retargets_none_and_goes_on_toward_the_newest_rendering_once_unpaused():
    nodes = fleet(3)
    started = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 1.0)  # w0 targeted to B, not started yet
    paused = targeting.hold_reason(C, True, False, None, "")
    held = targeting.step(nodes, started.rollout, C, None, 1, UPSTREAM, paused, 2.0)
    assert held.targeted == [] and held.rollout["targets"] == started.rollout["targets"]
    assert held.rollout["config"] == B  # the record is as it was: nothing moved
    assert "paused" in held.waiting and "3 node(s) wait for it: w0, w1, w2" in held.waiting
    resumed = targeting.step(nodes, held.rollout, C, None, 1, UPSTREAM, "", 3.0)
    assert resumed.targeted == ["w0"] and resumed.rollout["targets"]["w0"]["config"] == C


def test_a_cordoned_node_is_skipped_the_next_ready_one_goes_and_the_pool_names_why():
    nodes = [Member("w0", done(A), not_ready=CORDONED, created=0.0)] + fleet(3)[1:]
    got = targeting.step(nodes, {}, B, None, 2, UPSTREAM, "", 1.0)
    # the cordoned node is unavailable (one of 2 slots) and is no candidate: the oldest ready one goes
    assert got.targeted == ["w1"]
    assert CORDONED in got.waiting and "not targeted until they are" in got.waiting
    state, why = rolloutstatus.node_state(nodes[0], got.rollout, B, None)
    assert state == "Waiting" and CORDONED in why


def test_a_failure_budget_parks_failed_nodes_and_lets_them_retry_one_slot_at_a_time():
    nodes, policy = fleet(3), RolloutPolicy(failure_budget=3)
    rollout, now = {}, 1.0
    for name in ("w0", "w1", "w2"):  # each fails in turn: the budget lets the next one go
        got = targeting.step(nodes, rollout, B, None, 1, policy, "", now)
        assert got.targeted == [name]
        nodes = replace(nodes, **{name: {"state": "Degraded", "currentConfig": A, "desiredConfig": B,
                                         "reason": "registry down"}})
        rollout, now = got.rollout, now + 1
    halted = targeting.step(nodes, rollout, B, None, 1, policy, "", now)
    assert "failure budget is 3" in halted.halted
    # the three hold no slot; one is let retry, and only one
    assert halted.retried == ["w0"]
    parked = sorted(n for n, e in halted.rollout["targets"].items() if e.get("parked"))
    assert parked == ["w1", "w2"]
    again = targeting.step(nodes, halted.rollout, B, None, 1, policy, "", now + 1)
    assert again.retried == [] and again.targeted == []
    assert rolloutstatus.node_state(nodes[1], again.rollout, B, None)[1].endswith("the pool's failure budget)")


def test_max_unavailable_takes_a_signed_percentage_as_strconv_atoi_does():
    assert parse_max_unavailable("+10%", 30) == parse_max_unavailable("10%", 30) == 3


def test_the_arbiter_pool_takes_one_node_at_a_time_and_waits_while_a_master_is_unavailable():
    assert candidates.arbiter_limits("arbiter", ["master", "worker", "arbiter"], 3) == 1
    assert candidates.arbiter_limits("arbiter", ["arbiter", "worker"], 3) == 3  # no master: not that topology
    assert candidates.arbiter_limits("worker", ["master", "arbiter"], 3) == 3
    assert "master node(s) m0 are unavailable" in candidates.arbiter_hold("arbiter", ["m0"])
    assert "arbiter node(s) a0 are unavailable" in candidates.arbiter_hold("master", ["a0"])
    assert candidates.arbiter_hold("worker", ["m0"]) == "" and candidates.arbiter_hold("master", []) == ""


# -- upstream, re-stated from node_controller.go / layered_node_state.go at 7ff337a4 -------------------

def _ann(rep: Optional[Dict]) -> Dict[str, str]:
    return {k: v for k, v in (rep or {}).items() if isinstance(v, str) and v}


def up_is_node_done(a):
    if not a.get("currentConfig") or a.get("currentConfig") != a.get("desiredConfig"):
        return False
    d, c = a.get("desiredImage"), a.get("currentImage")
    if d is None and c is None:
        image_done = True
    else:
        image_done = bool(d) and bool(c) and d == c
    return image_done and a.get("state") == "Done"


def up_is_mcd_failing(a):
    return a.get("currentConfig") != a.get("desiredConfig") and a.get("state") in ("Degraded", "Unreconcilable")


def up_unavailable(a, ready):
    return not ready or (not up_is_node_done(a) and not up_is_mcd_failing(a))


def up_candidacy(a, layered, pool_config, mosc_image):
    if layered:
        return not (a.get("desiredImage") == mosc_image and a.get("desiredConfig") == pool_config)
    if a.get("desiredConfig") == pool_config:
        return "desiredImage" in a
    return True


def upstream_targets(nodes, layered, pool_config, mosc_image, max_unavailable) -> List[str]:
    """getAllCandidateMachines, then updateCandidateMachines' sortNodeList and cut."""
    unavail = [n for n in nodes if up_unavailable(n["ann"], n["ready"])]
    if len(unavail) >= max_unavailable:
        return []
    capacity, failing, cands = max_unavailable - len(unavail), 0, []
    for n in nodes:
        if not up_candidacy(n["ann"], layered, pool_config, mosc_image):
            failing += up_is_mcd_failing(n["ann"])
            continue
        if not n["ready"]:
            continue
        cands.append(n)
    if failing >= capacity:
        return []
    capacity -= failing
    if capacity < len(cands):
        zoned = sorted((n for n in cands if n["zone"] is not None), key=lambda n: (n["zone"], n["created"]))
        bare = sorted((n for n in cands if n["zone"] is None), key=lambda n: n["created"])
        cands = (zoned + bare)[:capacity]
    return sorted(n["name"] for n in cands)


STATES = ("Done", "Working", "Degraded", "Unreconcilable")
node_strategy = st.fixed_dictionaries({
    "state": st.sampled_from(STATES), "current": st.sampled_from((A, B)), "desired": st.sampled_from((A, B)),
    "image": st.sampled_from((None, IMG_A, IMG_B)), "ready": st.booleans(),
    "zone": st.sampled_from((None, "a", "b")),
})


@settings(max_examples=400, deadline=None)
@given(st.lists(node_strategy, min_size=1, max_size=12), st.integers(min_value=1, max_value=5), st.booleans(),
       st.booleans())
def test_step_targets_what_upstreams_getAllCandidateMachines_and_sortNodeList_target(specs, max_unavailable,
                                                                                       layered, paused):
    members, nodes = [], []
    for i, s in enumerate(specs):
        rep = {"state": s["state"], "currentConfig": s["current"], "desiredConfig": s["desired"]}
        if s["image"]:  # both image annotations, as the MCD writes them (node-agent: see nodestatus.is_node_done)
            rep.update(currentImage=s["image"], desiredImage=s["image"])
        labels = {candidates.ZONE_LABEL: s["zone"]} if s["zone"] else {}
        not_ready = "" if s["ready"] else f"node w{i} is reporting NotReady=False"
        members.append(Member(f"w{i}", rep, True, not_ready, labels, float(len(specs) - i)))
        nodes.append({"name": f"w{i}", "ann": _ann(rep), "ready": s["ready"], "zone": s["zone"],
                      "created": float(len(specs) - i)})
    image = IMG_B if layered else None
    hold = targeting.hold_reason(B, paused, layered, image, "")
    ours = targeting.step(members, {}, B, image, max_unavailable, UPSTREAM, hold, 1.0)
    want = [] if paused else upstream_targets(nodes, layered, B, IMG_B, max_unavailable)
    assert sorted(ours.targeted) == want


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=2, max_value=10), st.integers(min_value=1, max_value=4),
       st.integers(min_value=1, max_value=6), st.booleans(), st.lists(st.tuples(st.integers(0, 10), st.sampled_from(
           ("fail", "done", "work"))), max_size=60))
def test_with_any_failure_budget_no_more_than_maxUnavailable_nodes_may_be_updating_at_once(
        size, max_unavailable, budget, with_mcd, events):
    """Whatever fails, recovers or retries, the nodes the server lets work (targeted or let retry,
    not parked, not Done) and a real MCD's Node failing on the target (it retries as it will, so it
    keeps its slot, as upstream) never outnumber maxUnavailable."""
    policy = RolloutPolicy(failure_budget=budget)
    reports = {f"w{i}": done(A) for i in range(size)}
    mcd = {"state": "Degraded", "currentConfig": A, "desiredConfig": B, "reason": "x"} if with_mcd else None
    rollout: Dict = {}
    for node_index, what in events + [(0, "none")]:
        members = [Member(n, r, created=float(i)) for i, (n, r) in enumerate(sorted(reports.items()))]
        if mcd is not None:
            members.append(Member("mcd", mcd, ours=False, created=-1.0))
        rollout = targeting.step(members, rollout, B, None, max_unavailable, policy, "", 1.0).rollout
        let_work = [n for n, e in rollout["targets"].items()
                    if not e.get("parked") and not (reports[n]["state"] == "Done" and reports[n]["currentConfig"] == B)]
        mcd_may_work = mcd is not None and mcd["state"] != "Done"
        assert len(let_work) + mcd_may_work <= max_unavailable
        assert "mcd" not in rollout["targets"]
        if node_index == size and mcd is not None:  # the MCD's node retries on its own
            mcd = {"fail": mcd, "done": done(B), "work": {"state": "Working", "currentConfig": A,
                                                        "desiredConfig": B}}[what] if mcd["state"] != "Done" else mcd
            continue
        name = f"w{node_index % size}"
        entry = rollout["targets"].get(name)
        if entry is None or entry.get("parked"):
            continue  # not its turn: served "waiting", it changes nothing
        if what == "fail":
            reports[name] = {"state": "Degraded", "currentConfig": A, "desiredConfig": B, "reason": "x"}
        elif what == "done":
            reports[name] = done(B)
        elif what == "work":
            reports[name] = {"state": "Working", "currentConfig": A, "desiredConfig": B}


def test_a_member_done_on_the_config_but_not_on_the_image_it_is_targeted_to_is_served_updating_not_done():
    """rolloutctl.desired_for's X-Rollout: a node Done on A with the base image, targeted to A with
    the build's image (a pool made layered), is updating until it reports Done with that image
    (upstream's IsDone compares currentImage with desiredImage too); then it is done."""
    from types import SimpleNamespace

    from agent.server.cluster.rolloutctl import RolloutControl
    from agent.server.store.nodestore import NodeRecord, PoolRow

    me = SimpleNamespace(spec_of=lambda name: {} if name == A else None)
    row = PoolRow("worker", A, A, rollout={"config": A, "targets": {"w0": {"config": A, "at": 1.0, "image": IMG_A}}})

    def answer(report):
        return RolloutControl.desired_for(me, NodeRecord("w0", "worker", "", "", report, 0.0), row, IMG_A)
    assert answer(dict(done(A), currentImage="quay.io/base:1"))[:3] == (A, IMG_A, "updating")
    assert answer(done(A, IMG_A))[:3] == (A, IMG_A, "done")


def test_every_test_the_rule_table_of_docs_rollout_names_exists():
    """docs/rollout.md, "Upstream's rules and ours, one by one": each `folder/file.py::test` in its
    table is a test of that name in that file (a renamed test would leave the table pointing nowhere)."""
    import os
    import re

    from tests.helpers import paths

    text = open(os.path.join(paths.REPO, "docs", "rollout.md"), encoding="utf-8").read()
    table = text.split("## Upstream's rules and ours, one by one", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`([a-z0-9_]+/test_[a-z0-9_]+\.py)(?:::(test_[A-Za-z0-9_]+))?`", table)
    assert len(named) >= 15, named
    for path, test in named:
        source = open(os.path.join(paths.REPO, "tests", path), encoding="utf-8").read()
        assert not test or re.search(rf"^def {test}\(", source, re.M), f"{path}::{test} is not a test"


def test_a_member_targeted_to_a_layered_image_is_served_it_as_layered_by_a_state_that_does_not_show_the_build():
    """A worker whose watch has not brought the build's success yet still serves a targeted node
    the image it was targeted to as its layered image (the node annotations name it, so the node
    reports it as its desiredImage); a bench run at 200 nodes saw 4 nodes served it unlayered."""
    from agent.server.rollout import gating

    got = gating.for_member("worker", B, {B: "quay.io/base:1"}, {}, {}, IMG_B, targeted=True)
    assert (got.config, got.image, got.layered) == (B, IMG_B, True)
    waiting = gating.for_member("worker", B, {B: "quay.io/base:1"}, {}, {}, IMG_A)
    assert (waiting.image, waiting.layered) == (IMG_A, False)  # what a waiting node runs: informational
