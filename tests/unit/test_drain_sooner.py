"""drains.sooner (issue 53): a drain refusal due only to Nodes whose Done the replica holds but whose
uncordon its Node cache has not seen yet is told to ask again in ``UNCORDON_RETRY`` seconds, naming
them; any other refusal keeps the Retry-After the lease store gave it."""

from agent.server.rollout import drains
from agent.server.rollout.drains import DrainAnswer


def refused(limit, holders, retry=30):
    return DrainAnswer(False, "w2", "worker", limit, retry_after=retry, holders=holders, max_unavailable=1)


def test_a_refusal_due_only_to_a_done_node_not_yet_seen_uncordoned_says_ask_again_in_1_s_and_names_it():
    answer = drains.sooner(refused(0, []), ["w1"], limit_without=1)
    d = answer.to_dict()
    assert (answer.granted, answer.retry_after, d["retryAfter"]) == (False, drains.UNCORDON_RETRY, 1)
    assert "w1 reported Done" in d["reason"] and "ask again in 1 s" in d["reason"]


def test_a_refusal_the_holders_alone_fill_keeps_its_retry_after():
    # Even with w1 available there would be 1 slot, and w3 holds it.
    assert drains.sooner(refused(0, ["w3"]), ["w1"], limit_without=1).retry_after == 30


def test_a_grant_or_a_refusal_with_no_such_node_is_unchanged():
    granted = DrainAnswer(True, "w2", "worker", 1, holders=["w2"])
    assert drains.sooner(granted, ["w1"], limit_without=2) is granted
    answer = refused(0, [])
    assert drains.sooner(answer, [], limit_without=1) is answer


def test_a_node_cordoned_by_our_drain_with_no_lease_and_no_targeting_entry_is_one_whose_uncordon_is_on_its_way():
    # w1: its Done released its lease and the step dropped its entry (another worker took the Done);
    # w4 still holds its lease; w5's lease ran out mid-drain (still targeted); w6 gave its lease back
    # without a Done (still targeted)
    marked = ["w1", "w4", "w5", "w6"]
    over = drains.drains_over(marked, holders=["w3", "w4"], targeted={"w4", "w5", "w6", "w2"})
    assert over == ["w1"]
    answer = drains.sooner(refused(1, ["w3"]), over, limit_without=2)
    assert answer.retry_after == drains.UNCORDON_RETRY and "w1 reported Done" in answer.to_dict()["reason"]
    assert drains.drains_over(marked, holders=[], targeted=set(marked)) == []
