"""A NotReady Node is named where an admin looks, and the pool's conditions never contradict each
other (issue 49): progress.conditions, nodestatus.calculate_status, targeting.summary, the views'
READY column and Not ready line, nodes.with_readiness."""

from agent.server.cli import rolloutview, views
from agent.server.cluster.kube_nodes import counts_of
from agent.server.cluster.nodes import with_readiness
from agent.server.rollout import nodestatus, progress, rolloutstatus, targeting

NOW = 1_800_000_000.0


def kube_node(name, ready="True"):
    return {"metadata": {"name": name, "labels": {"node-role.kubernetes.io/infra": ""}},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def done(config):
    return {"state": "Done", "currentConfig": config, "desiredConfig": config}


def test_an_updated_pool_with_a_notready_node_says_it_waits_for_that_node_in_both_conditions():
    status = nodestatus.calculate_status([(kube_node("infra-0", "Unknown"), done("A")), (kube_node("infra-1"), done("A"))],
                                         "A", None)
    assert status.unavailable_reasons == ["node infra-0 is reporting NotReady=Unknown"]
    conds = {c["type"]: c for c in progress.conditions(counts_of(status), "A", "A", "")}
    updated, updating = conds["Updated"], conds["Updating"]
    assert (updated["status"], updating["status"]) == ("False", "True")  # as upstream's calculateStatus
    assert updated["message"] == ("2 of 2 node(s) updated to A; waiting for 1 node(s) to be ready and available: "
                                  "node infra-0 is reporting NotReady=Unknown")
    assert updating["message"] == ("All nodes are updated to MachineConfig A; waiting for 1 node(s) to be ready and "
                                   "available: node infra-0 is reporting NotReady=Unknown")
    assert "updating" not in updating["message"]


def test_a_pool_still_updating_keeps_upstreams_words():
    status = nodestatus.calculate_status([(kube_node("infra-0"), done("A"))], "B", None)
    conds = {c["type"]: c for c in progress.conditions(counts_of(status), "B", "A", "")}
    assert conds["Updating"]["message"] == "All nodes are updating to MachineConfig B"
    assert conds["Updated"]["message"] == "0 of 1 node(s) updated to B (current A)"


def test_the_rollout_summary_and_describe_pool_name_the_notready_node():
    members = [targeting.Member("infra-0", done("A"), not_ready="node infra-0 is reporting NotReady=Unknown"),
               targeting.Member("infra-1", done("A"))]
    summary = rolloutstatus.summary(members, {}, "A", None, 1, NOW)
    assert summary["notReady"] == {"infra-0": "node infra-0 is reporting NotReady=Unknown"}
    assert "  Not ready:         infra-0 (node infra-0 is reporting NotReady=Unknown)" in \
        rolloutview.pool_rollout_lines({"rollout": summary})


class Truth:
    def __init__(self, nodes):
        self.nodes = nodes

    def ready(self):
        return True

    def not_ready(self, name):
        node = self.nodes.get(name)
        return None if node is None else nodestatus.check_node_ready(node)


def item(name):
    return {"name": name, "pool": "infra", "report": done("A"), "updated": True}


def test_get_nodes_has_a_ready_column_from_the_node_objects_and_the_reason_of_a_notready_one():
    items = [item("infra-0"), item("infra-1"), item("gone")]
    with_readiness(Truth({"infra-0": kube_node("infra-0", "Unknown"), "infra-1": kube_node("infra-1")}), items)
    assert [(i.get("ready"), i.get("notReady")) for i in items] == [
        ("False", "node infra-0 is reporting NotReady=Unknown"), ("True", None), (None, None)]
    rows = [line.split()[:3] for line in views.nodes_table(items, NOW, width=200).splitlines()]
    assert rows[:4] == [["NAME", "POOL", "READY"], ["infra-0", "infra", "False"], ["infra-1", "infra", "True"],
                        ["gone", "infra", "-"]]
    assert views.nodes_table(items, NOW, width=200).splitlines()[1].endswith("node infra-0 is reporting NotReady=Unknown")
    assert "Ready:               False (node infra-0 is reporting NotReady=Unknown)" in views.describe_node(items[0], None, NOW)


def test_without_node_objects_there_is_no_ready_column():
    items = [item("w0")]
    with_readiness(None, items)
    assert "READY" not in views.nodes_table(items, NOW, width=200)
