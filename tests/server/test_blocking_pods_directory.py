"""A pool's blocking-pod selector on the directory backend (ours; agent/server/rollout/blockingpods.py,
agent/server/cluster/podblockers.py), in process: there are no pods, so a valid selector holds
nobody back and the pool says it has no effect here; an invalid one holds the pool's new targeting
all the same (fail closed) and the pool says what is wrong and where. The Kubernetes backend's
behaviour, with pods: tests/kube/test_kube_targeting_upstream.py."""

from agent.server.cli import views
from agent.server.cluster.podblockers import NO_PODS
from agent.server.rollout.blockingpods import ANNOTATION
from tests.helpers.wait import wait_for
from tests.server.test_maintenance_window import (  # noqa: F401 (served: the fixture)
    NODES,
    PICKED_UP,
    new_target,
    pool,
    report,
    served,
    target,
)
from tests.server.test_server_api import edit_yaml


def annotate(state, value: str) -> None:
    edit_yaml(state / "machineconfigpools" / "worker.yaml", "  name: worker\n",
              f"  name: worker\n  annotations:\n    {ANNOTATION}: '{value}'\n")


def test_on_the_directory_backend_a_selector_holds_nobody_back_and_the_pool_says_it_has_no_effect(served):  # noqa: F811
    state, app, _ = served
    annotate(state, "app=batch")
    a = target(app)
    for node in NODES:
        report(app, node, a)
    new_target(app, state, "/etc/b", (a,))
    rollout = wait_for(lambda: (lambda r: r.get("updating") == ["w0"] and r)(pool(app)["status"]["rollout"]),
                       "w0 targeted: no pod holds it", PICKED_UP)
    assert rollout["blockingPods"] == {"selector": "app=batch", "ignored": NO_PODS, "waiting": 0}
    assert f"Blocking pods:       selector 'app=batch': {NO_PODS}" in views.describe_pool(pool(app), 0.0)


def test_an_invalid_selector_holds_the_pool_and_the_pool_says_what_is_wrong_and_where(served):  # noqa: F811
    state, app, _ = served
    annotate(state, "app in ()")
    a = target(app)
    for node in NODES:
        report(app, node, a)
    new_target(app, state, "/etc/b", (a,))
    rollout = wait_for(lambda: (lambda r: r.get("blockingPods") and r)(pool(app)["status"]["rollout"]),
                       "the pool reads its selector", PICKED_UP)
    assert rollout["blockingPods"]["invalid"].startswith(
        f"annotation {ANNOTATION}: at character 9 (')'): 'in' and 'notin' need at least one value"), rollout
    assert rollout["waitReason"].startswith("the pool's blocking-pod selector is invalid, so nothing is newly targeted "
                                            f"until it is fixed: annotation {ANNOTATION}: at character 9"), rollout
    assert "updating" not in rollout and rollout["waiting"] == list(NODES)
    table = views.pools_table([pool(app)], 0.0, width=None)
    assert "worker: blocking-pod selector INVALID, nothing is newly targeted until it is fixed" in table, table
