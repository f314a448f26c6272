"""MachineConfigNodes as upstream keeps them (openshift/machine-config-operator 7ff337a4), on a real
kube-apiserver 1.20.2 with OpenShift's CRDs, ``serve --backend kubernetes`` as the user bound to
deploy/rbac.yaml (node state in the API): one per Node, with or without node-agent and whatever
pool it selects, owned by it, with every condition from the start (pkg/operator/sync.go
``syncMachineConfigNodes``, upgrade_monitor.go); none for a Pending Node, nor for a name that
has no Node (issue 45: a report is evidence about a Node); an orphan deleted; one update walked
through its phases: Cordoned and Drained True as the server cordons and drains the node,
UpdateExecuted and AppliedFilesAndOS Unknown while it applies, RebootedNode Unknown while its
reboot is pending, the Node's currentConfig and the MCN's current still the old config until
the node is back, then Updated with the others False "Action during update to X: ...".

The 1.20 API server enforces neither the CRD's schema nor its CEL rules: every version of every
MCN the tests saw is validated against the CRD here, each as a transition from the version seen
before it (tests/helpers/crd_validate.py; the rules with ``oldSelf``).

The module finds its worker's control plane as a new one (``kube_cluster_reset``) and makes a pool of
its own (maxUnavailable 100%, so that no other Node holds its slots); the test plays node-agent
over HTTP and the kubelet (Nodes).
"""

import json

import pytest
import yaml

from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
MCD = "machineconfiguration.openshift.io/"
USER = "node-config-server-mcn"
ROLE = "node-role.kubernetes.io/mcnp"
POOL = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
        "metadata": {"name": "mcnp"},
        "spec": {"machineConfigSelector": {"matchExpressions": [{"key": MCD + "role", "operator": "In",
                                                                 "values": ["worker", "mcnp"]}]},
                 "nodeSelector": {"matchLabels": {ROLE: ""}}, "maxUnavailable": "100%"}}
SECOND = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
          "metadata": {"name": "50-mcnp-second", "labels": {MCD + "role": "mcnp"}},
          "spec": {"config": {"ignition": {"version": "3.4.0"},
                              "storage": {"files": [{"path": "/etc/mcnp-second", "contents": {"source": "data:,2"}}]}}}}
TYPES = ["UpdatePrepared", "UpdateExecuted", "UpdatePostActionComplete", "UpdateComplete", "Resumed", "Drained",
         "AppliedFilesAndOS", "Cordoned", "RebootedNode", "Updated", "Uncordoned", "NodeDegraded",
         "PinnedImageSetsDegraded", "PinnedImageSetsProgressing"]


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server(USER, POOL)


@pytest.fixture(scope="module")
def server(kube, tmp_path_factory):
    srv = ServerProcess(None, tls=make_tls(str(tmp_path_factory.mktemp("tls"))), token="b00tstrap", workers=1,
                        kubelet=kube.kubelet_cert,
                        extra_args=["--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for(USER)])
    with srv:
        yield srv


class Seen:
    """Every version of each MCN a test read, in order: what the CRD test validates."""

    def __init__(self):
        self.versions = {}

    def add(self, obj):
        kept = self.versions.setdefault(obj["metadata"]["name"], [])
        if not kept or kept[-1]["metadata"]["resourceVersion"] != obj["metadata"]["resourceVersion"]:
            kept.append(obj)
        return obj


SEEN = Seen()


def create_node(kube, name, labels=None, phase=""):
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels or {}}}
    if phase:
        body["status"] = {"phase": phase}
    r = kube.session().post(kube.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text
    return r.json()


def mcn(kube, name):
    r = kube.get(f"{MCO}/machineconfignodes/{name}")
    return SEEN.add(r.json()) if r.ok else None


def conditions(obj):
    return {c["type"]: c for c in ((obj or {}).get("status") or {}).get("conditions") or []}


def mcn_where(kube, name, check, what):
    """``name``'s MCN once ``check(conditions, object)`` holds (every version read is kept); one
    just made has no status yet (its status is the next write), so it is not checked."""
    def seen():
        obj = mcn(kube, name)
        return obj if obj is not None and conditions(obj) and check(conditions(obj), obj) else None
    return wait_for(seen, f"MachineConfigNode {name}: {what}", 60)


def node_annotations(kube, name):
    return kube.get(f"/api/v1/nodes/{name}").json()["metadata"].get("annotations") or {}


def report(server, node, state, current, desired, **more):
    body = dict({"pool": "mcnp", "state": state, "currentConfig": current, "desiredConfig": desired,
                 "labels": {ROLE: ""}}, **more)
    r = server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)
    assert r.status_code == 200 and r.json().get("counted", True) is not False, r.text


def pool_target(server):
    r = server.session().get(server.url("/api/v1/pools/mcnp"), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()["spec"]["configuration"]["name"]


@pytest.fixture(scope="module")
def made(kube, server):
    """A Node of the pool without node-agent, a Node selecting no pool, a Pending Node (then
    Running): their MCNs as made."""
    out = {"plain-node": create_node(kube, "m-plain", {ROLE: ""})}
    create_node(kube, "m-nopool")
    create_node(kube, "m-pending", {ROLE: ""}, phase="Pending")
    out["plain"] = mcn_where(kube, "m-plain", lambda c, o: c, "made with its conditions")
    out["nopool"] = mcn_where(kube, "m-nopool", lambda c, o: c, "made for a Node in no pool")
    out["pending"] = mcn(kube, "m-pending")
    r = kube.session().patch(kube.url + "/api/v1/nodes/m-pending/status", timeout=10,
                             data=json.dumps({"status": {"phase": "Running"}}),
                             headers={"Content-Type": "application/merge-patch+json"})
    assert r.status_code == 200, r.text
    out["running"] = mcn_where(kube, "m-pending", lambda c, o: c, "made once the Node is no longer Pending")
    return out


def test_syncMachineConfigNodes_one_per_node_owned_by_it_with_every_condition_from_the_start(made):
    """A Node of the pool without node-agent and a Node selecting no pool each get one (pool
    "not-yet-set": GetPrimaryPoolNameForMCN), owned by the Node, every type of allConditionTypes
    False NotYetOccurred, observedGeneration the object's generation, no current config; a
    Pending Node none until it is no longer Pending."""
    obj = made["plain"]
    assert obj["spec"] == {"node": {"name": "m-plain"}, "pool": {"name": "mcnp"},
                           "configVersion": {"desired": "not-yet-set"}}
    assert [(o["kind"], o["name"], o["uid"]) for o in obj["metadata"]["ownerReferences"]] == \
        [("Node", "m-plain", made["plain-node"]["metadata"]["uid"])]
    conds = conditions(obj)
    assert list(conds) == TYPES  # 12 and the PinnedImageSets pair; no UpdateCompatible
    assert all((c["status"], c["reason"], c["message"]) == ("False", "NotYetOccurred",
                                                            f"This node has not yet entered the {t} phase")
               for t, c in conds.items())
    assert obj["status"]["observedGeneration"] == obj["metadata"]["generation"]
    assert obj["status"]["configVersion"] == {"desired": "not-yet-set"}  # current omitted until known
    assert made["nopool"]["spec"]["pool"] == {"name": "not-yet-set"}
    assert made["pending"] is None and made["running"]["spec"]["pool"] == {"name": "mcnp"}


def test_an_mcn_whose_node_is_gone_is_deleted(kube, server):
    """syncMachineConfigNodes: "Node %s has been removed, deleting associated MCN" (one nobody owns
    as well: the garbage collector deletes only an owned one)."""
    body = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigNode",
            "metadata": {"name": "m-orphan"}, "spec": {"node": {"name": "m-orphan"}, "pool": {"name": "mcnp"},
                                                       "configVersion": {"desired": "not-yet-set"}}}
    r = kube.session().post(kube.url + f"{MCO}/machineconfignodes", json=body, timeout=10)
    assert r.status_code == 201, r.text
    wait_for(lambda: kube.get(f"{MCO}/machineconfignodes/m-orphan").status_code == 404, "the orphan deleted", 60)


@pytest.fixture(scope="module")
def late(kube, server):
    """A name its kubelet's certificate proves reports before its Node exists; then the Node."""
    target = pool_target(server)
    report(server, "m-late", "Done", target, target)
    out = {"target": target, "kept": server.session().get(server.url("/api/v1/nodes/m-late"), timeout=10).json(),
           "before": kube.get(f"{MCO}/machineconfignodes/m-late").status_code}
    create_node(kube, "m-late", {ROLE: ""})
    out["after"] = mcn_where(kube, "m-late", lambda c, o: c.get("Updated", {}).get("status") == "True",
                             "Updated once its Node exists")
    return out


def test_a_name_with_no_node_gets_no_mcn_until_its_node_exists_then_its_report_is_on_it(late):
    """Its report is kept in its registration meanwhile (issue 45: evidence about a Node, never a
    claim to one); the MCN made for the Node carries that report and says what it says."""
    assert late["kept"]["report"]["state"] == "Done" and late["before"] == 404
    obj = late["after"]
    assert json.loads(obj["metadata"]["annotations"]["node-agent.openshift.io/report"])["report"]["state"] == "Done"
    assert obj["status"]["configVersion"] == {"desired": late["target"], "current": late["target"]}


@pytest.fixture(scope="module")
def update(kube, server):
    """One node's update from the pool's first config to its second (a new MachineConfig): what
    its MCN and Node said at each phase."""
    first = pool_target(server)
    create_node(kube, "m-up", {ROLE: ""})
    report(server, "m-up", "Done", first, first)
    out = {"first": first, "done-first": mcn_where(kube, "m-up", lambda c, o: c["Updated"]["status"] == "True",
                                                   "Updated on the first config")}
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(SECOND))
    second = out["second"] = wait_for(lambda: (lambda t: t if t != first else None)(pool_target(server)),
                                      "the pool's second config")
    wait_for(lambda: node_annotations(kube, "m-up").get(MCD + "desiredConfig") == second, "m-up targeted")
    ask = server.node_session("m-up")
    wait_for(lambda: ask.post(server.url("/api/v1/nodes/m-up/drain"), timeout=30,
                              json={"pool": "mcnp", "config": second}).status_code == 200, "the drain done (no pods)")
    out["drained"] = mcn_where(kube, "m-up", lambda c, o: c["Drained"]["status"] == "True", "Drained")
    report(server, "m-up", "Working", first, second)
    out["applying"] = mcn_where(kube, "m-up", lambda c, o: c["AppliedFilesAndOS"]["status"] == "Unknown", "applying")
    report(server, "m-up", "Working", second, second, reason="reboot pending")
    out["rebooting"] = mcn_where(kube, "m-up", lambda c, o: c["RebootedNode"]["status"] == "Unknown", "rebooting")
    out["rebooting-node"] = node_annotations(kube, "m-up")
    report(server, "m-up", "Done", second, second)
    out["done"] = mcn_where(kube, "m-up", lambda c, o: c["Updated"]["status"] == "True" and
                            o["status"]["configVersion"].get("current") == second, "Updated on the second config")
    out["done-node"] = node_annotations(kube, "m-up")
    return out


def test_cordoned_and_drained_turn_true_as_the_server_cordons_and_drains_the_node(update):
    """drain_controller.go: Cordoned True, then Drained True "Drained node. ..."; UpdatePrepared
    True; Updated False as the update began (upgrade_monitor.go)."""
    c = conditions(update["drained"])
    assert (c["Cordoned"]["status"], c["Cordoned"]["reason"]) == ("True", "UpdateExecutedCordoned")
    assert c["Drained"]["message"].startswith("Drained node. The drain is complete")
    assert (c["UpdateExecuted"]["status"], c["UpdateExecuted"]["reason"]) == ("Unknown", "Drained")
    assert c["UpdatePrepared"]["message"] == "Update Compatible. Post Cfg Actions: [] Drain Required: true"
    assert (c["Updated"]["status"], c["Updated"]["reason"]) == ("False", "Updated")


def test_the_in_progress_phases_are_unknown(update):
    c = conditions(update["applying"])
    assert (c["UpdateExecuted"]["status"], c["UpdateExecuted"]["reason"]) == ("Unknown", "AppliedFilesAndOS")
    assert c["AppliedFilesAndOS"]["message"].startswith("Applying files and new OS config to node.")
    assert c["Drained"]["lastTransitionTime"] == conditions(update["drained"])["Drained"]["lastTransitionTime"]
    c = conditions(update["rebooting"])
    assert (c["RebootedNode"]["status"], c["RebootedNode"]["message"]) == ("Unknown", "Upgrade requires a reboot.")
    assert c["UpdateExecuted"]["status"] == "True" and c["AppliedFilesAndOS"]["status"] == "True"


def test_the_nodes_current_config_is_the_new_one_only_after_the_reboot_it_needs(update):
    """pkg/daemon/writer.go SetDone after the node is back: until then the Node's currentConfig
    annotation and the MCN's status.configVersion.current name the config it runs."""
    assert update["rebooting-node"][MCD + "currentConfig"] == update["first"]
    assert update["rebooting-node"][MCD + "state"] == "Working"
    assert update["rebooting"]["status"]["configVersion"] == {"desired": update["second"], "current": update["first"]}
    assert update["done-node"][MCD + "currentConfig"] == update["second"]


def test_updated_leaves_every_other_condition_false_saying_what_it_did_during_the_update(update):
    """upgrade_monitor.go: the Updated parent resets the others ("Action during update to X: ...");
    a condition that never changed keeps the time it was made."""
    c = conditions(update["done"])
    assert c["Updated"]["status"] == "True"
    assert all(x["status"] == "False" for t, x in c.items() if t != "Updated")
    prefix = f"Action during update to {update['second']}: "
    for kind in ("Cordoned", "Drained", "AppliedFilesAndOS", "UpdateExecuted", "Uncordoned", "RebootedNode"):
        assert c[kind]["message"].startswith(prefix), c[kind]
    made = conditions(update["done-first"])
    assert c["NodeDegraded"] == made["NodeDegraded"]  # never changed: its time kept
    assert update["done"]["status"]["observedGeneration"] == update["done"]["metadata"]["generation"]


@pytest.mark.cel
def test_every_version_of_every_mcn_seen_validates_against_the_crd_as_a_transition(made, late, update):
    """Schema and CEL rules (the API server of the tests checks neither), each version judged
    against the one seen before it (the rules with ``oldSelf``: observedGeneration must not
    decrease ...): the MCN of a Node without node-agent, of one in no pool, of one made late,
    during a drain, while applying, waiting for its reboot, updated."""
    from tests.helpers import crd_validate  # cel-python: the marker cel (pyproject.toml)

    assert {"m-plain", "m-nopool", "m-pending", "m-late", "m-up"} <= set(SEEN.versions)
    # the update's five phases, each a version of its own (how many more were seen between them is timing)
    phases = [update[k]["metadata"]["resourceVersion"] for k in ("done-first", "drained", "applying", "rebooting", "done")]
    assert len(set(phases)) == 5 and set(phases) <= {v["metadata"]["resourceVersion"] for v in SEEN.versions["m-up"]}
    for name, versions in SEEN.versions.items():
        for old, new in zip([None] + versions[:-1], versions):
            assert crd_validate.problems(new, old=old) == [], (name, old, new)
