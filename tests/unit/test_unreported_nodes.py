"""Every Node is in the node list (``--backend kubernetes``), those node-agent never reported for
too (nodes.unmanaged_item, nodes.merged_page, kube_nodes.NodeTruth.unreported), and the views
say "never" for their last report."""

import threading

from agent.server.cli import views
from agent.server.cluster.kube_nodes import NodeTruth
from agent.server.cluster.nodes import merged_page, unmanaged_item

MCD = "machineconfiguration.openshift.io/"
POOLS = {"worker": {"metadata": {"name": "worker"},
                    "spec": {"nodeSelector": {"matchLabels": {"node-role.kubernetes.io/worker": ""}}}}}
W = {"node-role.kubernetes.io/worker": ""}


class Cache:
    def __init__(self, nodes):
        self.nodes = {n["metadata"]["name"]: n for n in nodes}
        self.synced = threading.Event()
        self.synced.set()
        self.changes = 0

    def snapshot(self):
        return dict(self.nodes)

    def get(self, name):
        return self.nodes.get(name)


def node(name, labels=W, annotations=None):
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations or {}},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}


def item(name):
    return {"name": name}


def pages(records, nodes, limit):
    """Every page as the route makes them: the store's page from ``after``, merged."""
    truth, out, after = NodeTruth(Cache(nodes), store=None), [], ""
    while True:
        page = [r for r in sorted(records) if r > after][:limit]
        found = truth.unreported(POOLS, after, page, len(page) == limit)
        merged = merged_page([item(n) for n in page], [item(f[0]) for f in found], limit)
        out += [i["name"] for i in merged]
        if len(merged) < limit:
            return out
        after = merged[-1]["name"]


def test_pages_of_any_size_list_every_store_record_and_every_node_once_in_order():
    # a, d: a record and a Node; c, h: records with no Node (no kubelet); b, e, f, g, z: Nodes only
    records = ["a", "c", "d", "h"]
    nodes = [node(n) for n in ("a", "b", "d", "e", "f", "g", "z")]
    every = sorted(set(records) | {n["metadata"]["name"] for n in nodes})
    for limit in (1, 2, 3, 4, 7, 500):
        assert pages(records, nodes, limit) == every, limit


def test_a_node_without_a_report_is_an_unmanaged_item_of_its_pool_with_its_mcd_state():
    truth = NodeTruth(Cache([node("w-0", annotations={MCD + "state": "Done", MCD + "currentConfig": "A",
                                                      MCD + "desiredConfig": "A"}),
                             node("x-0", labels={"kubernetes.io/os": "linux"})]), store=None)
    found = {f[0]: f for f in truth.unreported(POOLS, "", [], False)}
    w0 = unmanaged_item(found["w-0"], {"worker": ("A", None)})
    assert (w0["pool"], w0["report"]["state"], w0["updated"], w0["rollout"]["state"]) == ("worker", "Done", True, "Unmanaged")
    assert w0["membership"] == "the Node's labels; no report from node-agent" and w0["reportedAt"] == ""
    x0 = unmanaged_item(found["x-0"], {"worker": ("A", None)})
    assert x0["pool"] == "" and x0["membership"].startswith("Node x-0: ") and x0["updated"] is False
    assert unmanaged_item(truth.unreported_one("w-0", POOLS), {"worker": ("B", None)})["updated"] is False
    assert truth.unreported_one("gone", POOLS) is None


def test_the_views_say_never_for_a_node_that_never_reported():
    it = unmanaged_item(("w-0", "worker", "the Node's labels; no report from node-agent", {}), {"worker": ("A", None)})
    assert "never" in views.nodes_table([it], 0.0, wide=True, width=None)
    text = views.describe_node(it, None, 0.0)
    assert "Last report:         never (no node-agent report)" in text

