"""First boots that go wrong, seen with ``kubectl``: two replicas of ``serve --backend
kubernetes`` (node state in the API) on a real kube-apiserver 1.20.2 with OpenShift's CRDs, and
the five first boots of tests/helpers/firstboot_faults.py against one of them, twice: once as a
first boot runs (before its kubelet, with the bootstrap token only: names not proven yet), once
with each name proven by a kubelet client certificate from the control plane's CA (a name that
binds a Node: issue 45).

A name not proven yet: each failed or stalled first boot is one Warning Event on its pool
(upstream's MCO-2224: FirstbootFailed, "Node N failed during firstboot at stage 'S': ... (image:
...)", with "(not proven yet: its registration is pending)" after it), made once however many
replicas decide it; never an Event on a MachineConfigNode, and no MCN is made for it. A name
not proven yet whose Node object exists gets nothing at all (a bootstrap-token holder makes no
Event about a real Node's name). A proven name: the Warning is on its pool and its MCN, and the
MCN's condition of ours says it. A stall that ends (a later report, or here its pool's deadline
lengthened) or a Done gives a Normal Event after the Warning, which kubectl lists in the order
they happened. The pools' first-boot counts and /metrics count
every name's first boots, proven or not.

When a first boot stalls is the test's to say, not the machine's speed: the servers' deadline is
an hour, and the test shortens the pools' of the stalled scenarios once their nodes sent their
last report, then gives it back before they report again.

A server with this backend reads every pool and MachineConfig of its cluster, and other modules'
objects must not count: the module finds its worker's control plane as a new one
(``kube_cluster_reset``, tests/conftest.py).
"""

import json
import re
from collections import Counter

import pytest

from agent.core.objectchecks import FIRSTBOOT_DEADLINE_ANNOTATION
from agent.server.cluster.kube_firstboots import NOTICE
from agent.server.rollout.mcnconditions import FIRST_BOOT
from tests.helpers import firstboot_faults as faults
from tests.helpers.certs import make_tls, write_combined
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
NAMESPACE = "node-config-server"
TOKEN, ADMIN = "fb-kube-token", "fb-kube-admin"
# Time under the test's control: the servers' deadline is longer than the module, so no first boot
# stalls until the test shortens its pool's (the annotation an admin sets), once the stalled
# scenarios' nodes have sent their last report; it gives the pool's back before they report again.
# With an 8 s deadline, a loaded machine's gap between two reports of a resumed first boot was one
# more stall, and one more Warning than the tests count (issue 54; docs/development.md).
SERVER_DEADLINE = "1h"
STALL_NOW = "1s"
# How long a wait here may take before it names what never came: a bound for a hang, not a speed
# the tests ask for.
HANG = 300
WARNINGS = {"Failed": "FirstbootFailed", "Stalled": "FirstBootStalled"}
NOT_PROVEN = "(not proven yet: its registration is pending)"
SQUATTED = "fbn-real-node"  # a Node that exists; a bootstrap-token holder's first boot under its name
KUBELET_PEM = "var/lib/kubelet/pki/kubelet-client-current.pem"  # report.kubeletCertFile's default


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server("node-config-server-fb", *faults.SOURCE_OBJECTS,
                                               {"apiVersion": "v1", "kind": "Node", "metadata": {"name": SQUATTED}})


@pytest.fixture(scope="module")
def replicas(kube, tmp_path_factory):
    kubeconfig = kube.kubeconfig_for("node-config-server-fb")
    top = tmp_path_factory.mktemp("fb-tls")
    tls = make_tls(str(top))
    (top / "admin-token").write_text(ADMIN + "\n")
    args = ["--backend", "kubernetes", "--kubeconfig", kubeconfig, "--firstboot-deadline", SERVER_DEADLINE,
            "--admin-token-file", str(top / "admin-token")]
    with ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as one, \
            ServerProcess(None, tls=tls, token=TOKEN, workers=1, extra_args=args) as two:
        yield one, two


def events(kube):
    r = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["items"] if e["reason"].lower().startswith("firstboot")]


def about(items, kind, name, node=None):
    """The Events about object ``kind``/``name`` (and whose message is about ``node``)."""
    return [e for e in items if (e["involvedObject"]["kind"], e["involvedObject"]["name"]) == (kind, name)
            and (node is None or e["message"].startswith(f"Node {node} "))]


def mentioning(kube, node):
    """Every Event of the namespace about ``node`` or naming it, whatever its reason."""
    r = kube.get(f"/api/v1/namespaces/{NAMESPACE}/events")
    assert r.status_code == 200, r.text
    return [e for e in r.json()["items"] if node in e["message"] or e["involvedObject"]["name"] == node]


def mcn(kube, node):
    r = kube.get(f"{MCO}/machineconfignodes/{node}")
    return r.json() if r.ok else None


def condition(kube, node):
    found = [c for c in ((mcn(kube, node) or {}).get("status") or {}).get("conditions") or [] if c["type"] == FIRST_BOOT]
    return found[0] if found else None


def shown_everywhere(replicas, node, outcome, stage):
    def shown():
        views = [faults.node_view(srv.session(), srv.base_url, node).get("firstBoot") or {} for srv in replicas]
        return all((v.get("outcome"), v.get("stage")) == (outcome, stage) for v in views)

    wait_for(shown, f"{node}: {outcome} at stage {stage} on every replica", HANG)


def one_first_boot(replicas, top, node, sc=faults.SCENARIOS[1]):
    """``node``'s first boot as scenario ``sc`` (by default the skew refusal: it fails at once),
    shown by every replica."""
    one = replicas[0]
    run = faults.Run(sc, node, faults.make_root(top, sc, node, one.base_url, one.tls.ca_pem(), TOKEN, ""))
    faults.first_boot(run)
    assert run.exit_code == sc.exit_code, run.stderr
    shown_everywhere(replicas, node, sc.outcome, sc.stage)
    return run


def pool_deadline(kube, pool, value):
    """Pool ``pool``'s first-boot deadline set to ``value`` (None: its annotation removed, the
    servers' deadline again), as an admin sets it."""
    kube.kubectl("annotate", "--overwrite", "machineconfigpool", pool,
                 f"{FIRSTBOOT_DEADLINE_ANNOTATION}={value}" if value else f"{FIRSTBOOT_DEADLINE_ANNOTATION}-")


def node_object(kube, name, pool):
    body = {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {f"node-role.kubernetes.io/{pool}": ""}}}
    r = kube.session().post(kube.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text


def squat(kube, replicas, top):
    """A bootstrap-token holder's first boot under the name of a Node that exists: it fails (the
    skew refusal), and every replica shows it, as any first boot."""
    return one_first_boot(replicas, top, SQUATTED)


@pytest.fixture(scope="module")
def seen(kube, replicas, tmp_path_factory):
    """The squatted name's first boot, then the five first boots not proven, then the five
    proven; the stalled scenarios' pools then given a deadline their nodes have passed; what the
    API held once each was announced; then again once the stalled nodes of both went on: the
    killed ones no longer stalled (their pool's deadline back), then run again and Done; the
    rebooted ones back with a Done report."""
    one, two = replicas
    top = str(tmp_path_factory.mktemp("fb-kube-nodes"))
    views = [lambda node, srv=srv: faults.node_view(srv.session(), srv.base_url, node) for srv in (one, two)]
    out = {"squat": squat(kube, replicas, top)}

    def kubelet(run):  # the kubelet's certificate in the root before the first boot: the name is proven;
        # and the Node it registered (a name with no Node has no MachineConfigNode: issue 48)
        node_object(kube, run.node, run.scenario.pool)
        cert, key = kube.kubelet_cert(run.node)
        with open(cert, "rb") as c, open(key, "rb") as k:
            write_combined(f"{run.root}/{KUBELET_PEM}", c.read(), k.read())

    for which, prefix, prepare in (("unproven", "fbu-", None), ("proven", "fbp-", kubelet)):
        out[which] = faults.run_all(one.session(), one.base_url, one.tls.ca_pem(), TOKEN, top, prefix, wait_for,
                                    HANG, views=views, prepare=prepare, stalls=False)
        print(f"{which} first boots shown by both replicas after (s):", faults.summary(out[which]))
    unproven, proven = out["unproven"].values(), out["proven"].values()
    stalled = [r for r in [*unproven, *proven] if r.scenario.outcome == "Stalled"]
    for pool in sorted({r.scenario.pool for r in stalled}):  # worker and infra: their other first boots failed
        pool_deadline(kube, pool, STALL_NOW)
    for r in stalled:
        shown_everywhere(replicas, r.node, "Stalled", r.scenario.stage)

    def announced():
        got = events(kube)
        return all(about(got, "MachineConfigPool", r.scenario.pool, r.node) for r in unproven) and all(
            about(got, "MachineConfigNode", r.node) and about(got, "MachineConfigPool", r.scenario.pool, r.node)
            for r in proven) and got

    out["before"] = wait_for(announced, "a Warning Event about every failed and stalled first boot", HANG)
    out["mcns"] = {r.node: wait_for(lambda r=r: (condition(kube, r.node) or {}).get("reason") ==
                                    f"FirstBoot{r.scenario.outcome}" and mcn(kube, r.node), f"{r.node}'s condition",
                                    HANG)
                   for r in proven}
    out["pools"] = {name: one.session().get(one.url(f"/api/v1/pools/{name}")).json()["status"]["firstBoots"]
                    for name in {r.scenario.pool for r in unproven}}
    out["metrics"] = one.session().get(one.url("/metrics")).text  # the replica every node reported to
    killed = [r for r in stalled if r.scenario.name == "killed-after-fetch"]
    pool_deadline(kube, "worker", None)  # before they report again: the killed first boots run on, no longer stalled
    for r in killed:
        shown_everywhere(replicas, r.node, "Running", r.scenario.stage)
    faults.recover(out["unproven"])  # infra's deadline still passed: the rebooted nodes are stalled up to their Done
    faults.recover(out["proven"])
    pool_deadline(kube, "infra", None)
    stalled_proven = [r for r in proven if r.scenario.outcome == "Stalled"]
    stalled_unproven = [r for r in unproven if r.scenario.outcome == "Stalled"]
    for r in stalled_proven:
        wait_for(lambda r=r: (condition(kube, r.node) or {}).get("status") == "True", f"{r.node} done", HANG)
    out["after"] = wait_for(
        lambda: (all(len(about(events(kube), "MachineConfigNode", r.node)) == 2 for r in stalled_proven)
                 and all(len(about(events(kube), "MachineConfigPool", r.scenario.pool, r.node)) == 2
                         for r in stalled_unproven) and events(kube)),
        "a Normal Event after each stalled first boot's Warning", HANG)
    out["listed"] = {name: json.loads(kube.kubectl("get", "events", "-n", NAMESPACE, "-o", "json", "--field-selector",
                                                   f"involvedObject.name={name}").stdout)["items"]
                     for name in [r.node for r in stalled_proven] + [r.scenario.pool for r in stalled_unproven]}
    return out


def test_a_failed_or_stalled_first_boot_not_proven_yet_is_one_warning_event_on_its_pool_of_two_replicas(seen):
    for run in seen["unproven"].values():
        mine = about(seen["before"], "MachineConfigPool", run.scenario.pool, run.node)
        assert [(e["type"], e["reason"], e["count"]) for e in mine] == [("Warning", WARNINGS[run.scenario.outcome],
                                                                         1)], mine  # once, of two replicas
        assert mine[0]["message"].endswith(NOT_PROVEN), mine[0]["message"]
        assert mine[0]["source"]["component"] == "machine-config-server"
        assert mine[0]["involvedObject"]["namespace"] == NAMESPACE
        assert re.fullmatch(rf"{run.scenario.pool}\.[0-9a-f]+\.[0-9a-f]{{8}}", mine[0]["metadata"]["name"])


def test_no_machineconfignode_is_made_or_given_an_event_for_a_name_not_proven(seen, kube):
    for run in seen["unproven"].values():
        assert about(seen["after"], "MachineConfigNode", run.node) == []
        assert mcn(kube, run.node) is None, run.node


def test_a_name_not_proven_whose_node_exists_gets_no_event_and_nothing_on_its_machineconfignode(seen, kube):
    # the squatted name failed and was shown by both replicas before the ten other first boots
    # ran: every round of both replicas since (one a second) decided it. Its Node has an MCN, as
    # every Node (issue 48), with nothing of the squatter's on it.
    assert mentioning(kube, SQUATTED) == []
    obj = wait_for(lambda: mcn(kube, SQUATTED), f"{SQUATTED}'s MachineConfigNode")
    assert condition(kube, SQUATTED) is None
    assert not set(obj["metadata"].get("annotations") or {}) & {"node-agent.openshift.io/report", NOTICE}


def test_a_proven_names_failed_and_stalled_first_boot_is_a_warning_event_on_its_pool_and_its_machineconfignode_once(
        seen):
    for run in seen["proven"].values():
        reason = WARNINGS[run.scenario.outcome]
        for kind, name in (("MachineConfigPool", run.scenario.pool), ("MachineConfigNode", run.node)):
            mine = about(seen["before"], kind, name, run.node)
            assert [(e["type"], e["reason"], e["count"]) for e in mine] == [("Warning", reason, 1)], mine  # once,
            # of two replicas
            assert NOT_PROVEN not in mine[0]["message"]
            assert mine[0]["source"]["component"] == "machine-config-server"
            assert mine[0]["involvedObject"]["namespace"] == NAMESPACE


def test_a_failure_event_says_what_upstreams_says(seen):
    for which, tail in (("proven", "(image: quay.io)"), ("unproven", f"(image: quay.io) {NOT_PROVEN}")):
        run = seen[which]["apply-rolled-back"]
        message = about(seen["before"], "MachineConfigPool", "worker", run.node)[0]["message"]
        assert message.startswith(f"Node {run.node} failed during firstboot at stage 'apply': applying ")
        assert message.endswith(tail) and "No space left on device" in message


def test_the_machineconfignode_condition_says_each_proven_first_boots_outcome(seen):
    status = {"Failed": "False", "Stalled": "Unknown"}
    for run in seen["proven"].values():
        cond = [c for c in seen["mcns"][run.node]["status"]["conditions"] if c["type"] == FIRST_BOOT][0]
        assert (cond["status"], cond["reason"]) == (status[run.scenario.outcome], f"FirstBoot{run.scenario.outcome}")
        assert f"stage {run.scenario.stage}" in cond["message"]


@pytest.mark.cel
def test_the_machineconfignodes_written_validate_against_the_crd(seen):
    from tests.helpers import crd_validate

    for node, obj in seen["mcns"].items():
        assert crd_validate.problems(obj) == [], node


def test_a_stall_that_ends_or_a_done_follows_the_warning_with_a_normal_event_kubectl_lists_in_order(seen):
    for which, kind in (("proven", "MachineConfigNode"), ("unproven", "MachineConfigPool")):
        for name in ("killed-after-fetch", "reboot-never-back"):
            run = seen[which][name]
            obj = run.node if kind == "MachineConfigNode" else run.scenario.pool
            mine = about(seen["after"], kind, obj, run.node)
            assert [e["type"] for e in mine] == ["Warning", "Normal"] and mine[0]["reason"] == "FirstBootStalled", mine
            # the killed first boot's pool gave it its time again (resumed: its run again and its Done
            # say nothing more); the rebooted one came back Done
            assert mine[1]["reason"] == ("FirstBootResumed" if name == "killed-after-fetch" else "FirstBootCompleted")
            assert [e["count"] for e in mine] == [1, 1]  # once each, of two replicas
            listed = [e["reason"] for e in seen["listed"][obj] if e["message"].startswith(f"Node {run.node} ")]
            assert listed == [e["reason"] for e in mine]


def samples(text):
    from prometheus_client.parser import text_string_to_metric_families

    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_pools_and_metrics_count_first_boots_whether_proven_or_not(seen):
    runs = [seen["squat"], *seen["unproven"].values(), *seen["proven"].values()]
    for run in runs:
        listed = seen["pools"][run.scenario.pool]["nodes"][run.node]
        assert (listed["outcome"], listed["stage"]) == (run.scenario.outcome, run.scenario.stage)
        assert listed.get("pending", False) is (not run.node.startswith("fbp-"))  # shown as pending, listed all the same
    got = samples(seen["metrics"])
    by = Counter((r.scenario.outcome.lower(), r.scenario.pool, r.scenario.stage) for r in runs)
    assert {k: v for k, v in got.items() if k[0] == "node_config_server_firstboots"} == {
        ("node_config_server_firstboots", (("outcome", o), ("pool", p), ("stage", s))): float(n)
        for (o, p, s), n in by.items()}
    for pool, n in Counter(r.scenario.pool for r in runs if r.scenario.outcome == "Stalled").items():
        assert got[("node_config_server_firstboots_stalled", (("pool", pool),))] == float(n)
    # every failure reported to this replica ended a first boot, the squatted name's too
    assert got[("node_config_server_firstboots_ended_total", (("outcome", "failed"), ("pool", "worker"),
                                                              ("stage", "skew")))] == 3.0


@pytest.fixture(scope="module")
def approved_later(seen, kube, replicas, tmp_path_factory):
    """A first boot that failed under a name not proven yet, announced on its pool; then the admin
    approves the name (it binds a Node from then on): what the API holds once it is announced
    again."""
    node = "fbl-skew-refused"
    one_first_boot(replicas, str(tmp_path_factory.mktemp("fb-later")), node)
    before = wait_for(lambda: about(events(kube), "MachineConfigPool", "worker", node), f"{node}'s pool Event", 30)
    node_object(kube, node, "worker")  # its kubelet registers the Node, then the admin approves the name
    admin = replicas[1].session(token=False)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    r = admin.post(replicas[1].url(f"/api/v1/nodes/{node}/approve"))
    assert r.status_code == 200 and r.json()["state"] == "Approved", r.text
    after = wait_for(lambda: about(events(kube), "MachineConfigNode", node) and
                     (condition(kube, node) or {}).get("reason") == "FirstBootFailed" and events(kube),
                     f"{node}'s Event on its MachineConfigNode once approved", 30)
    return node, before, after


def test_a_name_the_admin_approves_later_has_its_failed_first_boot_announced_again_on_its_machineconfignode(
        approved_later, kube):
    node, before, after = approved_later
    assert [e["message"].endswith(NOT_PROVEN) for e in about(before, "MachineConfigPool", "worker", node)] == [True]
    pool = about(after, "MachineConfigPool", "worker", node)
    assert [(e["type"], e["reason"], e["message"].endswith(NOT_PROVEN)) for e in pool] == [
        ("Warning", "FirstbootFailed", True), ("Warning", "FirstbootFailed", False)], pool
    assert [(e["type"], e["reason"], e["count"]) for e in about(after, "MachineConfigNode", node)] == [
        ("Warning", "FirstbootFailed", 1)]
    assert condition(kube, node)["status"] == "False"


def test_every_replica_names_each_first_boot_the_same(seen, replicas):
    for run in [*seen["unproven"].values(), *seen["proven"].values()]:
        views = [faults.node_view(srv.session(), srv.base_url, run.node)["firstBoot"] for srv in replicas]
        assert (views[0]["outcome"], views[0]["stage"]) == (views[1]["outcome"], views[1]["stage"])


def test_a_name_approved_before_its_node_exists_has_its_first_boot_announced_on_its_pool_only(kube, replicas,
                                                                                              tmp_path_factory):
    """Approved by the admin, so it binds a Node, but none exists yet: no MachineConfigNode to
    announce it on (issue 48: one per Node), so the pool's Event, once more after the one that
    said it was not proven, without those words."""
    node = "fbl-nodeless"
    one_first_boot(replicas, str(tmp_path_factory.mktemp("fb-nodeless")), node)
    wait_for(lambda: about(events(kube), "MachineConfigPool", "worker", node), f"{node}'s pool Event", 30)
    admin = replicas[1].session(token=False)
    admin.headers["Authorization"] = f"Bearer {ADMIN}"
    assert admin.post(replicas[1].url(f"/api/v1/nodes/{node}/approve")).json()["state"] == "Approved"
    pool = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(about(events(kube), "MachineConfigPool", "worker",
                                                                           node)), f"{node} announced again", 30)
    assert [(e["reason"], e["message"].endswith(NOT_PROVEN)) for e in pool] == [
        ("FirstbootFailed", True), ("FirstbootFailed", False)], pool
    assert about(events(kube), "MachineConfigNode", node) == [] and mcn(kube, node) is None
