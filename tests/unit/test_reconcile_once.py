"""A new state is reconciled (rendered, every pool stepped) once per process, however many callers
saw it before it was: a new MachineConfig rings the pools' bell for every held fetch, and each
woken fetch that read the state before this process had reconciled it called ``reconcile()``
(service.Cluster.state). Each of them then stepped every pool again under the cluster's lock, one
after the other: at 1,000 nodes, 1,000 steps of the worker pool before the first wave's fetches
were answered (docs/performance.md, "Rollout at fleet scale"). In-process, the directory
backend."""

import threading

from tests.helpers.wait import wait_for
from tests.unit.test_held_fetch_inputs import MC, two_members_done_on_a

CALLERS = 8


def new_state(tmp_path, new_app):
    """An app whose state directory just got a new MachineConfig this process has not reconciled:
    (cluster, the new state's signature)."""
    app, state, _ = two_members_done_on_a(tmp_path, new_app)
    cluster = app.cluster
    old = cluster._reconciled_sig
    cluster._lock.acquire()  # nobody reconciles it before the test's callers
    try:
        (state / "machineconfigs" / "60-held.yaml").write_text(MC)
        st = wait_for(lambda: (lambda s: s if s.signature != old else None)(cluster.watcher.current(check_now=True)),
                      "the new MachineConfig read from the state directory", 30)
    except BaseException:
        cluster._lock.release()
        raise
    return cluster, st.signature


def counting_steps(cluster, callers):
    """The (caller, pool) of each pool step made by one of ``callers`` (threads)."""
    steps = []
    inner = cluster._step_pool

    def step(st, name):
        if threading.current_thread() in callers:
            steps.append((threading.current_thread().name, name))
        return inner(st, name)

    cluster._step_pool = step
    return steps


def test_callers_that_saw_a_new_state_before_it_was_reconciled_step_each_pool_once_between_them(tmp_path, new_app):
    cluster, signature = new_state(tmp_path, new_app)
    callers = [threading.Thread(target=cluster.reconcile, name=f"fetch-{i}") for i in range(CALLERS)]
    steps = counting_steps(cluster, set(callers))
    try:
        for t in callers:  # each blocks on the cluster's lock, as the woken fetches did
            t.start()
    finally:
        cluster._lock.release()
    for t in callers:
        t.join(60)
        assert not t.is_alive()
    assert cluster._reconciled_sig == signature
    pools = [name for _, name in steps]
    assert sorted(pools) == sorted(set(pools)), f"a pool stepped more than once for one state: {steps}"


def test_a_forced_reconcile_of_the_state_already_reconciled_steps_every_pool_again(tmp_path, new_app):
    cluster, _ = new_state(tmp_path, new_app)
    cluster._lock.release()
    cluster.reconcile()
    me = threading.current_thread()
    steps = counting_steps(cluster, {me})
    cluster.reconcile()
    assert steps == []
    cluster.reconcile(force=True)  # bench_scale's, after it rewrote the reports behind the store's back
    assert sorted(name for _, name in steps) == sorted(cluster._rendered)


def test_a_fetch_that_waited_for_the_reconcile_of_a_new_state_answers_from_the_row_that_reconcile_stored(
        tmp_path, new_app):
    """Another worker has stored the new state's signature; this one reconciles it on n1's fetch,
    and that reconcile's step targets n1: the fetch answers the new target, not the config of the
    row it read before (a held fetch woken by the new state then waited out its hold)."""
    app, state, a = two_members_done_on_a(tmp_path, new_app)
    cluster = app.cluster
    cluster.stop_stepper()  # only this fetch reconciles
    (state / "machineconfigs" / "60-held.yaml").write_text(MC)
    st = wait_for(lambda: (lambda s: s if s.signature != cluster._reconciled_sig else None)(
        cluster.watcher.current(check_now=True)), "the new MachineConfig read from the state directory", 30)
    cluster.store.set_meta("state_signature", st.signature)  # as the worker that saw it first does
    fetched = cluster.fetch("worker", None, "n1")
    row = cluster.store.pools()["worker"]
    assert row.target != a and "n1" in (row.rollout.get("targets") or {}), row  # this fetch's reconcile targeted n1
    assert (fetched.served.config, fetched.rollout[0]) == (row.target, "updating")
