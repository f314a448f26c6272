"""agent/server/cluster/sharedruns.py: callers of the same work at the same time share one run of it,
and each returns only after a run that began after it asked (a pool's step sees its report)."""

import threading

from agent.server.cluster.sharedruns import SharedRuns
from tests.helpers.wait import wait_for


def test_callers_arriving_during_a_run_share_the_next_one_which_begins_after_they_asked():
    runs = SharedRuns()
    asked, seen_by_runs, returned = [], [], []
    release = threading.Event()

    def step():
        seen_by_runs.append(len(asked))  # how many calls the run can see
        if len(seen_by_runs) == 1:
            release.wait(10)

    def call(i):
        asked.append(i)
        runs.run("worker", step)
        returned.append((i, list(seen_by_runs)))

    first = threading.Thread(target=call, args=(0,))
    first.start()
    wait_for(lambda: seen_by_runs == [1], "the first run under way")
    others = [threading.Thread(target=call, args=(i,)) for i in range(1, 6)]
    for t in others:
        t.start()
    wait_for(lambda: len(asked) == 6, "five more callers waiting")
    release.set()
    for t in [first] + others:
        t.join(10)
    assert seen_by_runs == [1, 6]  # two runs for six callers: the second saw every call
    assert sorted(i for i, _ in returned) == list(range(6))
    assert all(seen[-1] == 6 for i, seen in returned if i)  # each later caller returned after the run that saw it


def test_a_run_that_raises_serves_nobody_and_other_keys_run_apart():
    runs = SharedRuns()
    calls = []

    def failing():
        calls.append("failing")
        raise RuntimeError("store away")

    try:
        runs.run("worker", failing)
    except RuntimeError:
        pass
    runs.run("worker", lambda: calls.append("again"))
    runs.run("infra", lambda: calls.append("infra"))
    assert calls == ["failing", "again", "infra"]
