"""The pool index (agent/server/rollout/poolindex.py): it answers what upstream's candidate rules
answer over the whole member list, and a step over an index kept from earlier steps (members and
entries filed again only where they changed) decides what a step over a fresh index decides."""

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.rolloutpolicy import PRIORITY_LABEL, RolloutPolicy
from agent.server.rollout import candidates, nodestatus, targeting
from agent.server.rollout.candidates import ZONE_LABEL, Member
from agent.server.rollout.entries import effective, entry_of
from agent.server.rollout.poolindex import PoolIndex

A, B = "rendered-worker-a", "rendered-worker-b"
NAMES = [f"n{i}" for i in range(8)]
CONFIGS = st.sampled_from([A, B, ""])
IMAGES = st.sampled_from([None, "quay.io/i@sha256:1", "quay.io/i@sha256:2"])


def report_strategy():
    settled = st.sampled_from([A, B]).map(lambda c: {"state": "Done", "currentConfig": c, "desiredConfig": c})
    return st.one_of(settled, settled, st.none(), st.fixed_dictionaries({
        "state": st.sampled_from(["Done", "Working", "Degraded", "Unreconcilable"]),
        "currentConfig": CONFIGS, "desiredConfig": CONFIGS, "currentImage": IMAGES, "desiredImage": IMAGES}))


def member_strategy(name):
    labels = st.fixed_dictionaries({}, optional={ZONE_LABEL: st.sampled_from(["z1", "z2"]),
                                                 PRIORITY_LABEL: st.sampled_from(["1", "-2", "x"])})
    return st.builds(Member, st.just(name), report_strategy(), st.booleans(),
                     st.sampled_from(["", "", "node is cordoned"]), labels, st.sampled_from([0.0, 1.0, 2.0]))


def entry_strategy():
    extra = st.fixed_dictionaries({}, optional={
        "image": IMAGES.filter(bool), "parked": st.just(1.0), "retry": st.just(1.0),
        "deferred": st.just({"from": A, "why": "a PodDisruptionBudget", "at": 1.0})})
    return st.builds(lambda config, more: {"config": config, "at": 1.0, **more}, st.sampled_from([A, B]), extra)


members_st = st.lists(st.sampled_from(NAMES), unique=True, max_size=8).flatmap(
    lambda names: st.tuples(*[member_strategy(n) for n in sorted(names)]).map(list))
rollout_st = st.dictionaries(st.sampled_from(NAMES), entry_strategy(), max_size=4).map(
    lambda targets: {"config": B, "targets": targets})


@settings(max_examples=300, deadline=None)
@given(members_st, rollout_st, st.sampled_from([A, B]), IMAGES, st.integers(0, 4),
       st.lists(st.sampled_from(NAMES), unique=True, max_size=3))
def test_the_index_answers_getAllCandidateMachines_and_the_counts_of_the_whole_list(members, rollout, target, image,
                                                                                    max_unavailable, blocked):
    retrying = [n for n, e in rollout["targets"].items() if e.get("retry")]
    want = targeting.get_all_candidate_machines(members, rollout, target, image, max_unavailable, blocked)
    index = PoolIndex.of(members)
    index.classify(rollout, target, image)
    got = index.candidates(max_unavailable, retrying, blocked)
    assert (got.capacity, got.room, got.unavailable, got.failing, got.not_ready, got.blocked, got.count) == \
        (want.capacity, want.room, want.unavailable, want.failing, want.not_ready, want.blocked, len(want.nodes))
    ordered = [m.name for m in targeting.rollout_order(want.nodes)]
    assert [m.name for m in index.first(len(ordered), set(got.blocked))] == ordered
    eff = {m.name: effective(m, entry_of(rollout, m.name)) for m in members}
    assert index.ready_on_target == sum(not m.not_ready and nodestatus.is_done(eff[m.name], target, image)
                                        for m in members)
    assert index.on_target == sum(candidates.is_desired_equal_to_pool(eff[m.name], target, None) for m in members)
    assert index.ours_not_done == sum(m.ours and not nodestatus.is_done(eff[m.name], target, image) for m in members)


def changed(members, edits):
    """The members with some replaced by new objects (a new report, readiness, labels), some gone."""
    by_name = {m.name: m for m in members}
    for name, new in edits:
        if new is None:
            by_name.pop(name, None)
        else:
            by_name[name] = new
    return [by_name[n] for n in sorted(by_name)]


edits_st = st.lists(st.sampled_from(NAMES).flatmap(lambda n: st.tuples(st.just(n), st.one_of(st.none(),
                                                                                             member_strategy(n)))),
                    max_size=2)
TARGETS = st.sampled_from([B, B, B, A])  # mostly one target: the entries, not a new target, file members again


@settings(max_examples=300, deadline=None)
@given(members_st, rollout_st, st.lists(st.tuples(edits_st, TARGETS, st.sampled_from([None, None, "quay.io/i@sha256:1"]),
                                                  st.integers(0, 3), st.sampled_from(["", "", "", "the pool is paused"])),
                                        min_size=1, max_size=8),
       st.sampled_from([RolloutPolicy(), RolloutPolicy(failure_budget=1), RolloutPolicy(canary_nodes=1)]))
def test_a_step_over_the_kept_index_decides_what_a_step_over_a_fresh_one_decides(members, rollout, steps, policy):
    kept = PoolIndex()
    now = 10.0
    for edits, target, image, max_unavailable, hold in steps:
        members = changed(members, edits)
        fresh = targeting.step(members, rollout, target, image, max_unavailable, policy, hold, now)
        got = targeting.step(members, rollout, target, image, max_unavailable, policy, hold, now, index=kept)
        assert dataclasses.asdict(got) == dataclasses.asdict(fresh)
        rollout, now = got.rollout, now + 10.0


def test_apply_takes_a_changed_member_and_a_gone_one_without_the_whole_list():
    """The sources' deltas (apply) instead of the whole list (sync): a member replaced and one gone."""
    members = [Member(f"w{i}", {"state": "Done", "currentConfig": A, "desiredConfig": A}, created=float(i))
               for i in range(4)]
    index = PoolIndex.of(members)
    index.classify({}, B, None)
    assert [m.name for m in index.first(10, ())] == ["w0", "w1", "w2", "w3"]
    index.apply([Member("w1", {"state": "Done", "currentConfig": B, "desiredConfig": B}, created=1.0)], ["w3"])
    index.classify({}, B, None)
    assert [m.name for m in index.first(10, ())] == ["w0", "w2"]
    assert (index.ready_on_target, index.ours_not_done) == (1, 2)


def test_a_node_targeted_by_one_step_is_no_candidate_of_the_next():
    """Its entry, not its report, changed: the kept index files it again."""
    members = [Member(f"w{i}", {"state": "Done", "currentConfig": A, "desiredConfig": A}, created=float(i))
               for i in range(3)]
    kept, rollout = PoolIndex(), {}
    for now, want in ((1.0, ["w0"]), (2.0, []), (3.0, [])):
        got = targeting.step(members, rollout, B, None, 1, RolloutPolicy(), "", now, index=kept)
        assert got.targeted == want
        rollout = got.rollout
