"""Two workers of one replica write a node's MachineConfigNode in turns (kube_mcn.McnWriter and
the store's ``turn``, agent/server/store/kube/workerturns.py): the second reads the object only
once the first has written, so its status ``test`` holds (it failed with 422 when both read the
same conditions)."""

import threading
import types

from agent.server.cluster.kube_mcn import McnWriter
from agent.server.store.kube.workerturns import WorkerTurns


class RecordingClient:
    """An API server that keeps one MachineConfigNode and records each call."""

    def __init__(self):
        self.calls = []
        self.obj = None

    def create(self, path, body):
        self.calls.append("create")
        self.obj = dict(body, metadata=dict(body["metadata"], resourceVersion="1", generation=1))
        return self.obj

    def get(self, path, **_):
        self.calls.append("get")
        return self.obj

    def merge_patch(self, path, body):
        self.calls.append("status")
        self.obj = dict(self.obj, status=body["status"])
        return self.obj

    json_patch = merge_patch


def _node(name):
    return {"metadata": {"name": name, "uid": "u-" + name, "annotations": {}}, "status": {}}


def test_a_workers_mcn_write_waits_for_the_turn_another_worker_holds(tmp_path):
    client = RecordingClient()
    store = types.SimpleNamespace(turn=WorkerTurns(str(tmp_path)).turn)
    writer = McnWriter(types.SimpleNamespace(store=store), client)
    other_worker = WorkerTurns(str(tmp_path))
    done = threading.Event()
    with other_worker.turn("mcn/n1"):
        t = threading.Thread(target=lambda: (writer.write("n1", _node("n1"), "worker"), done.set()))
        t.start()
        assert not done.wait(0.2) and client.calls == []  # nothing read while the other writes
    t.join(30)
    assert done.is_set() and client.calls[0] == "create" and "status" in client.calls


def test_without_a_shared_turn_the_write_goes_at_once():
    client = RecordingClient()
    writer = McnWriter(types.SimpleNamespace(store=object()), client)  # a store with no turns
    writer.write("n1", _node("n1"), "worker")
    assert client.calls[0] == "create" and "status" in client.calls
