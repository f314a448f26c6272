"""kube_sync.KubeSync.note_report: a Done that ends the server's drain writes the Node while the report
is recorded, its annotations and the uncordon in one patch, as the MCD uncordons before it says Done;
the rest of the write-back waits for the node loop (behind a queue of reports at 1,000 nodes, the cordoned Node held a slot of its pool
for seconds: docs/performance.md, "Rollout at fleet scale"). A Node someone else cordoned, a report
that is not Done on the config drained for, stay as they are."""

from agent.server.cluster.kube_drain import DRAINED_FOR
from agent.server.cluster.kube_sync import ANNOTATION as MCD
from agent.server.cluster.kube_sync import EARLY, KubeSync
from agent.server.store.nodestore import NodeRecord


class Client:
    def __init__(self):
        self.patches = []

    def merge_patch(self, path, body):
        self.patches.append((path, body))
        return {}


class Cache:
    def __init__(self, nodes):
        self.nodes = nodes

    def snapshot(self):
        return dict(self.nodes)

    def get(self, name):
        return self.nodes.get(name)


def node(name, annotations):
    return {"metadata": {"name": name, "annotations": annotations}, "spec": {"unschedulable": True}}


class Store:
    pending = {"w9"}  # a name whose report waits for approval (issue 45): it counts for nothing

    def pools(self):
        return {}

    def node(self, name):
        report = {"_server": {"pending": True}} if name in self.pending else {}
        return NodeRecord(node=name, pool="worker", why="", degraded="", report=report, received=0.0)


class Cluster:
    store = Store()

    def pool_of_rendered(self, name):
        return None

    def is_layered_pool(self, name):
        return False


class Source:
    reflectors = {"machineconfigpools": Cache({"worker": {"metadata": {"name": "worker"}}})}


def sync(nodes):
    s = KubeSync(cluster=Cluster(), source=Source(), client=Client())
    s.node_cache = Cache(nodes)
    return s


def done(config):
    return {"pool": "worker", "state": "Done", "currentConfig": config, "desiredConfig": config}


def test_a_done_on_the_config_drained_for_uncordons_the_node_now_and_queues_the_rest():
    s = sync({"w1": node("w1", {DRAINED_FOR: "rendered-b"})})
    s.note_report("w1", done("rendered-b"), "worker")
    [(path, patch)] = s.client.patches
    assert path == "/api/v1/nodes/w1" and patch["spec"] == {"unschedulable": None}
    annotations = patch["metadata"]["annotations"]
    assert annotations[DRAINED_FOR] is None  # the uncordon is the write of that Done, as the VM test asserts
    assert (annotations[MCD + "state"], annotations[MCD + "currentConfig"]) == ("Done", "rendered-b")
    assert "w1" in s._nodes  # its MachineConfigNode: the node loop's, which does not write this patch again
    assert EARLY in s._nodes["w1"][0]


def test_a_node_cordoned_by_someone_else_or_not_done_on_that_config_stays_cordoned():
    s = sync({"w1": node("w1", {}), "w2": node("w2", {DRAINED_FOR: "rendered-b"})})
    s.note_report("w1", done("rendered-b"), "worker")  # not our cordon
    s.note_report("w2", dict(done("rendered-b"), state="Working"), "worker")
    s.note_report("w2", done("rendered-a"), "worker")  # Done on another config than the one drained for
    s.note_report("w3", done("rendered-b"), "worker")  # no Node (yet)
    assert s.client.patches == []


def test_a_pending_report_never_uncordons_the_node_it_names():
    s = sync({"w9": node("w9", {DRAINED_FOR: "rendered-b"})})
    s.note_report("w9", done("rendered-b"), "worker")
    assert s.client.patches == []
