"""One server process writes a Node's targeting (agent/server/cluster/kube_targets.py ``owner_of``):
every process that lists the same writers picks the same one, and a writer coming or going moves
only the Nodes it takes or gives back."""

from hypothesis import given
from hypothesis import strategies as st

from agent.server.cluster.kube_targets import owner_of

NODES = [f"worker-{i:04d}" for i in range(2000)]
WRITERS = st.lists(st.from_regex(r"[a-z0-9-]{1,12}/[0-9]{1,6}", fullmatch=True), min_size=1, max_size=8, unique=True)


@given(WRITERS)
def test_every_node_has_one_owner_whatever_order_the_writers_are_listed_in(writers):
    for node in NODES[:200]:
        assert owner_of(node, writers) == owner_of(node, list(reversed(writers))) in writers


def test_the_nodes_are_shared_between_the_writers():
    writers = ["server-a/11", "server-a/12", "server-b/11"]
    shares = [sum(owner_of(n, writers) == w for n in NODES) for w in writers]
    assert all(500 <= s <= 830 for s in shares), shares  # about a third each


@given(WRITERS, st.from_regex(r"[a-z0-9-]{1,12}/[0-9]{1,6}", fullmatch=True))
def test_a_writer_that_comes_takes_nodes_only_for_itself_and_gives_them_back_when_it_goes(writers, new):
    if new in writers:
        return
    for node in NODES[:200]:
        before, after = owner_of(node, writers), owner_of(node, writers + [new])
        assert after in (before, new)


def test_a_taint_change_on_a_tainted_node_is_a_json_patch_whose_precondition_is_the_taints_alone():
    """kube_targets.json_patch_of (issue 53): the targeted node's taint removal and desiredConfig
    test the taints read, not the Node's resourceVersion, so the node's own Working report written
    meanwhile is no conflict; a Node without taints keeps the merge patch with its resourceVersion."""
    from agent.server.cluster.kube_targets import TAINT, json_patch_of, target_patch

    other = {"key": "example.com/dedicated", "effect": "NoSchedule"}
    node = {"metadata": {"name": "w1", "resourceVersion": "7", "annotations": {
        "machineconfiguration.openshift.io/desiredConfig": "rendered-a", "machineconfiguration.openshift.io/desiredImage": "x"}},
        "spec": {"taints": [other, dict(TAINT)]}}
    ops = json_patch_of(node, target_patch(node, "rendered-b", None, False))
    assert ops[:2] == [{"op": "test", "path": "/spec/taints", "value": [other, dict(TAINT)]},
                       {"op": "replace", "path": "/spec/taints", "value": [other]}]
    assert {"op": "add", "path": "/metadata/annotations/machineconfiguration.openshift.io~1desiredConfig",
            "value": "rendered-b"} in ops
    assert {"op": "remove", "path": "/metadata/annotations/machineconfiguration.openshift.io~1desiredImage"} in ops
    bare = {"metadata": {"name": "w2", "resourceVersion": "8", "annotations": {}}}
    assert json_patch_of(bare, target_patch(bare, "rendered-b", None, True)) == []
    assert json_patch_of(node, target_patch(node, "rendered-b", None, True)) == []  # no taint change: merge patch
