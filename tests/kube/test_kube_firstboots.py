"""First boots that go wrong, seen with ``kubectl``: two replicas of ``serve --backend
kubernetes`` (node state in the API) on a real kube-apiserver 1.20.2 with OpenShift's CRDs, and
the five first boots of tests/helpers/firstboot_faults.py against one of them.

Each failed or stalled first boot is a Warning Event on its pool (upstream's MCO-2224:
FirstbootFailed, "Node N failed during firstboot at stage 'S': ... (image: ...)") and on its
MachineConfigNode, written once however many replicas decide it, and the MCN's condition of ours
says it; a later report or Done gives a Normal Event after the Warning, which kubectl lists in
the order they happened.

The module has a control plane of its own, as test_kube_backend.py: a server with this backend
reads every pool and MachineConfig of its cluster, and other modules' objects must not count.
"""

import json

import pytest
import yaml

from agent.server.rollout.mcnconditions import FIRST_BOOT
from tests.helpers import firstboot_faults as faults
from tests.helpers.certs import make_tls
from tests.helpers.kube_cluster import KubeCluster, find_kube_bin
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
NAMESPACE = "node-config-server"
TOKEN = "fb-kube-token"
DEADLINE = 8.0  # room for a loaded machine: a stall between two reports would be one more Event the tests count
WARNINGS = {"Failed": "FirstbootFailed", "Stalled": "FirstBootStalled"}


@pytest.fixture(scope="module")
def kube(tmp_path_factory):
    if not find_kube_bin():
        pytest.skip("kube-apiserver 1.20.2 is not built: run make kube-bin (make test does)")
    with KubeCluster(str(tmp_path_factory.mktemp("kube-firstboots"))) as kc:
        kc.apply_examples()
        kc.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(faults.SOURCE_OBJECTS))
        kc.bind_server_user("node-config-server-fb")
        yield kc


@pytest.fixture(scope="module")
def replicas(kube, tmp_path_factory):
    kubeconfig = kube.kubeconfig_for("node-config-server-fb")
    tls = make_tls(str(tmp_path_factory.mktemp("fb-tls")))
    args = ["--backend", "kubernetes", "--kubeconfig", kubeconfig, "--firstboot-deadline", f"{DEADLINE:g}"]
    with ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as one, \
            ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as two:
        yield one, two


def events(kube):
    r = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["items"] if e["reason"].lower().startswith("firstboot")]


def about(items, kind, name):
    return [e for e in items if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (kind, name)]


def condition(kube, node):
    r = kube.get(f"{MCO}/machineconfignodes/{node}")
    if not r.ok:
        return None
    found = [c for c in (r.json().get("status") or {}).get("conditions") or [] if c["type"] == FIRST_BOOT]
    return found[0] if found else None


@pytest.fixture(scope="module")
def seen(kube, replicas, tmp_path_factory):
    """The five first boots, and what the API held once each was announced; then again once the
    two stalled nodes went on (a report, then Done)."""
    one, two = replicas
    views = [lambda node, srv=srv: faults.node_view(srv.session(), srv.base_url, node) for srv in (one, two)]
    runs = faults.run_all(one.session(), one.base_url, one.tls.ca_pem(), TOKEN,
                          str(tmp_path_factory.mktemp("fb-kube-nodes")), "fbk-", wait_for, DEADLINE, views=views)
    print("first boots shown by both replicas after (s):", faults.summary(runs))

    def announced():
        got = events(kube)
        return all(about(got, "MachineConfigNode", r.node) and about(got, "MachineConfigPool", r.scenario.pool)
                   for r in runs.values()) and got

    before = wait_for(announced, "a Warning Event about every failed and stalled first boot", 60)
    mcns = {r.node: wait_for(lambda r=r: (condition(kube, r.node) or {}).get("reason") ==
                             f"FirstBoot{r.scenario.outcome}" and kube.get(f"{MCO}/machineconfignodes/{r.node}").json(),
                             f"{r.node}'s condition") for r in runs.values()}
    faults.recover(runs)
    stalled = [r for r in runs.values() if r.scenario.outcome == "Stalled"]
    for r in stalled:
        wait_for(lambda r=r: (condition(kube, r.node) or {}).get("status") == "True", f"{r.node} done")
    after = wait_for(lambda: all(len(about(events(kube), "MachineConfigNode", r.node)) == 2 for r in stalled)
                     and events(kube), "a Normal Event after each stalled first boot's Warning")
    listed = {r.node: kube.kubectl("get", "events", "-n", NAMESPACE, "-o", "json", "--field-selector",
                                   f"involvedObject.name={r.node}").stdout for r in stalled}
    return runs, before, mcns, after, listed


def test_each_failed_and_stalled_first_boot_is_a_warning_event_on_its_pool_and_its_machineconfignode_once(seen):
    runs, before, _, _, _ = seen
    for run in runs.values():
        reason = WARNINGS[run.scenario.outcome]
        for kind, name in (("MachineConfigPool", run.scenario.pool), ("MachineConfigNode", run.node)):
            mine = [e for e in about(before, kind, name) if run.node in e["message"]]
            assert [(e["type"], e["reason"], e["count"]) for e in mine] == [("Warning", reason, 1)], mine  # once,
            # of two replicas
            assert mine[0]["source"]["component"] == "machine-config-server"
            assert mine[0]["involvedObject"]["namespace"] == NAMESPACE


def test_a_failure_event_says_what_upstreams_says(seen):
    runs, before, _, _, _ = seen
    run = runs["apply-rolled-back"]
    message = about(before, "MachineConfigPool", "worker")
    message = [e["message"] for e in message if run.node in e["message"]][0]
    assert message.startswith(f"Node {run.node} failed during firstboot at stage 'apply': applying ")
    assert message.endswith("(image: quay.io)") and "No space left on device" in message


def test_the_machineconfignode_condition_says_each_first_boots_outcome(seen):
    runs, _, mcns, _, _ = seen
    status = {"Failed": "False", "Stalled": "Unknown"}
    for run in runs.values():
        cond = [c for c in mcns[run.node]["status"]["conditions"] if c["type"] == FIRST_BOOT][0]
        assert (cond["status"], cond["reason"]) == (status[run.scenario.outcome], f"FirstBoot{run.scenario.outcome}")
        assert f"stage {run.scenario.stage}" in cond["message"]


@pytest.mark.cel
def test_the_machineconfignodes_written_validate_against_the_crd(seen):
    from tests.helpers import crd_validate

    for node, mcn in seen[2].items():
        assert crd_validate.problems(mcn) == [], node


def test_a_later_report_or_done_follows_the_warning_with_a_normal_event_kubectl_lists_in_order(seen):
    runs, _, _, after, listed = seen
    for name in ("killed-after-fetch", "reboot-never-back"):
        node = runs[name].node
        mine = about(after, "MachineConfigNode", node)
        assert [e["type"] for e in mine] == ["Warning", "Normal"] and mine[0]["reason"] == "FirstBootStalled"
        # the killed first boot ran again (a report: resumed) before its Done; the other came back Done
        assert mine[1]["reason"] in (("FirstBootResumed", "FirstBootCompleted") if name == "killed-after-fetch"
                                     else ("FirstBootCompleted",))
        assert [e["reason"] for e in json.loads(listed[node])["items"]] == [e["reason"] for e in mine]


def test_every_replica_names_each_first_boot_the_same(seen, replicas):
    runs = seen[0]
    for run in runs.values():
        views = [faults.node_view(srv.session(), srv.base_url, run.node)["firstBoot"] for srv in replicas]
        assert (views[0]["outcome"], views[0]["stage"]) == (views[1]["outcome"], views[1]["stage"])
