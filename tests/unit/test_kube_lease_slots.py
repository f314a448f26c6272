"""agent/server/store/kube/leases.py: where a drain grant looks for a free slot."""

from agent.server.store.kube import leases


def test_free_slots_are_those_below_the_limit_nobody_holds_live():
    held = {leases.slot_name("worker", 0): {"metadata": {"name": "drain-worker-0"},
                                            "spec": {"holderIdentity": "n1", "renewTime": leases.micro_time(100.0),
                                                     "leaseDurationSeconds": 60}},
            leases.slot_name("worker", 1): {"metadata": {}},  # nobody holds it: free
            leases.slot_name("worker", 5): {"metadata": {}}}  # above the limit: never a choice
    assert [i for i, _ in leases.free_slots(held, "worker", 4, 120.0)] == [1, 2, 3]
    assert [i for i, _ in leases.free_slots(held, "worker", 4, 161.0)] == [0, 1, 2, 3]  # n1's lease expired
    assert leases.free_slots({}, "worker", 2, 0.0) == [(0, None), (1, None)]


def test_a_wave_of_first_grants_spreads_over_the_free_slots_not_all_on_the_lowest():
    """Issue 53: every first try took the lowest free slot, so of a wave of nodes asking at once all
    but one lost the race (0.3-0.5 conflicting Lease writes per node with a drain). Now the first
    try too takes a slot of the node's own: a wave of a hundred over a hundred free slots mostly
    picks different ones, and a lost race picks again elsewhere."""
    first = [leases.spread(f"worker-{i}", 0, 100) for i in range(100)]
    assert all(0 <= k < 100 for k in first)
    assert len(set(first)) > 50 and first.count(0) < 5
    assert [leases.spread(f"worker-{i}", 1, 100) for i in range(100)] != first  # after a lost race: elsewhere
    assert leases.spread("n1", 0, 1) == 0 and leases.spread("n1", 3, 0) == 0
