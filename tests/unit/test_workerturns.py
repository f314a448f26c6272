"""A replica's workers take turns at the writes they would race for (agent/server/store/kube/
workerturns.py): one holder at a time, and the next holder learns the resourceVersion the last one
wrote."""

import collections
import threading

from agent.server.store.kube import workerturns
from agent.server.store.kube.workerturns import WorkerTurns


def test_the_next_holder_waits_for_the_turn_and_learns_what_the_last_one_wrote(tmp_path):
    a, b = WorkerTurns(str(tmp_path)), WorkerTurns(str(tmp_path))  # two workers: two open files
    inside, seen = threading.Event(), []
    with a.turn("pool/worker") as turn:
        assert turn.last == 0
        waiter = threading.Thread(target=lambda: seen.append(_take(b, inside)))
        waiter.start()
        assert not inside.wait(0.2)  # b cannot have it while a holds it
        turn.wrote = 4711
    waiter.join(30)
    assert seen == [4711]


def _take(turns, inside):
    with turns.turn("pool/worker") as turn:
        inside.set()
        return turn.last


def test_each_key_has_a_turn_of_its_own(tmp_path):
    a, b = WorkerTurns(str(tmp_path)), WorkerTurns(str(tmp_path))
    with a.turn("pool/worker") as held:
        held.wrote = 7
        with b.turn("pool/infra") as other:
            assert other.last == 0
    with b.turn("pool/infra") as other:
        assert other.last == 0
    with b.turn("pool/worker") as again:
        assert again.last == 7


def test_a_turn_that_writes_nothing_keeps_what_the_one_before_wrote(tmp_path):
    turns = WorkerTurns(str(tmp_path))
    with turns.turn("pool/worker") as t:
        t.wrote = 123456789
    with turns.turn("pool/worker"):
        pass
    with turns.turn("pool/worker") as t:
        assert t.last == 123456789
        t.wrote = 5  # shorter than the one before: nothing of it is left over
    with turns.turn("pool/worker") as t:
        assert t.last == 5


def test_a_turn_held_too_long_is_gone_without_and_writes_nothing_into_it(tmp_path, monkeypatch):
    monkeypatch.setattr(workerturns, "WAIT", 0.05)
    a, b = WorkerTurns(str(tmp_path)), WorkerTurns(str(tmp_path))
    with a.turn("pool/worker") as held:
        held.wrote = 9
        with b.turn("pool/worker") as without:  # the compare-and-swap still guards the row
            assert without.last == 0
            without.wrote = 10
    with b.turn("pool/worker") as t:
        assert t.last == 9


def test_a_process_of_its_own_gets_every_turn_at_once_knowing_nothing():
    with WorkerTurns(None).turn("pool/worker") as t:
        assert t.last == 0


def test_the_turn_says_whether_it_is_held(tmp_path, monkeypatch):
    monkeypatch.setattr(workerturns, "WAIT", 0.05)
    a, b = WorkerTurns(str(tmp_path)), WorkerTurns(str(tmp_path))
    with a.turn("pool/worker") as held:
        assert held.held
        with b.turn("pool/worker") as without:
            assert not without.held
    with WorkerTurns(None).turn("pool/worker") as alone:
        assert not alone.held


def test_a_drain_grant_holds_the_pools_drain_turn_while_it_counts_and_writes_and_leaves_its_write_to_the_next(
        tmp_path, monkeypatch):
    # two workers' grants counting the same list picked the same slot (a Lease refused with 409);
    # the next holder learns the resourceVersion of the last grant (its watch may not have it yet)
    from agent.server.store.kube.leases import KubeLeases

    monkeypatch.setattr(workerturns, "WAIT", 0.05)
    leases = KubeLeases.__new__(KubeLeases)  # no API server: only the turn around the grant
    leases._lock, leases._granting, leases.turns = threading.Lock(), {}, WorkerTurns(str(tmp_path))
    leases._wrote = collections.deque(maxlen=8)
    other_worker, seen = WorkerTurns(str(tmp_path)), []

    def grant(*_):
        with other_worker.turn("drains/worker") as t:
            seen.append(t.held)
        leases._wrote.append(42)  # the grant's write
        return "granted", None

    monkeypatch.setattr(leases, "_acquire", grant)
    assert leases.acquire("n1", "worker", "rendered-1", 1, 60.0, 0.0) == "granted"
    assert seen == [False]
    with other_worker.turn("drains/worker") as after:
        assert after.held and after.last == 42
