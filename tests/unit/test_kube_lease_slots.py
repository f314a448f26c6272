"""agent/server/store/kube/leases.py: where a drain grant looks for a free slot."""

from agent.server.store.kube import leases


def test_a_grant_that_lost_a_race_looks_for_a_slot_from_a_place_of_its_own():
    """The lowest free slot first; after a lost race each node starts elsewhere (a wave of a
    hundred asking at once no longer all take the same slot again)."""
    held = {leases.slot_name("worker", i): {"metadata": {}} for i in range(2)}  # not holders: free
    assert leases.free_slot({}, "worker", 4, 0.0) == (0, None)
    assert leases.free_slot({}, "worker", 4, 0.0, start=3) == (3, None)
    assert leases.spread("n1", 0, 100) == 0 and leases.spread("n1", 1, 1) == 0
    starts = {leases.spread(f"n{i}", 1, 100) for i in range(100)}
    assert len(starts) > 50  # spread out: few of a wave pick the same slot
    assert leases.free_slot(held, "worker", 2, 0.0, start=1)[0] == 1
