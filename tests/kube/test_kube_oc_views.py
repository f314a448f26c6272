"""What ``oc`` shows of node-config-server's writes is what OpenShift shows for the same Nodes: the
views of one rollout (``kubectl get mcp``, ``get mcn -o yaml``, ``describe node``, ``get events``)
compared field by field with what the MCO's own functions compute for the same Nodes and reports
(tests/helpers/mco_reference.py: GetPoolsForNode, calculateStatus, IsDoneAt, the MCD's writer, the
render and node controllers' Events); and pools the render controller cannot render (issue 48).

No kubelet runs: the test plays it (each Node is created with its Ready condition) and plays
node-agent (its reports, over HTTPS with the node's kubelet certificate). The control plane's
node lifecycle controller never marks these heartbeat-less Nodes NotReady by itself
(NO_NODE_LIFECYCLE). Pools are cluster-scoped and its counts must not depend on other modules'
Nodes: the module finds its worker's control plane as a new one (``kube_cluster_reset``).
"""

import json

import pytest
import yaml

from tests.helpers import mco_reference as ref
from tests.helpers.certs import make_tls
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

MCO = "/apis/machineconfiguration.openshift.io/v1"
MCD = "machineconfiguration.openshift.io/"
ROLE = "machineconfiguration.openshift.io/role"
W, M, INFRA = "node-role.kubernetes.io/worker", "node-role.kubernetes.io/master", "node-role.kubernetes.io/infra"
COLUMNS = ("CONFIG", "UPDATED", "UPDATING", "DEGRADED", "MACHINECOUNT", "READYMACHINECOUNT", "UPDATEDMACHINECOUNT",
           "DEGRADEDMACHINECOUNT")
USER = "node-config-server-oc"


@pytest.fixture(scope="module")
def kube(kube_cluster_reset):
    return kube_cluster_reset.ready_for_server(USER)


@pytest.fixture(scope="module")
def server(kube, tmp_path_factory):
    srv = ServerProcess(None, tls=make_tls(str(tmp_path_factory.mktemp("tls"))), token="b00tstrap", workers=1,
                        kubelet=kube.kubelet_cert,
                        extra_args=["--backend", "kubernetes", "--kubeconfig", kube.kubeconfig_for(USER)])
    with srv:
        yield srv


def api(kube, path):
    r = kube.get(path)
    assert r.status_code == 200, r.text
    return r.json()


def create_node(kube, name, labels):
    body = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "m"}]}}
    r = kube.session().post(kube.url + "/api/v1/nodes", json=body, timeout=10)
    assert r.status_code == 201, r.text


def report(server, node, pool, state, current, desired, reason=""):
    body = {"pool": pool, "state": state, "currentConfig": current, "desiredConfig": desired, "reason": reason}
    r = server.node_session(node).post(server.url(f"/api/v1/nodes/{node}/report"), data=json.dumps(body), timeout=10)
    assert r.status_code == 200, r.text


def machine_config(name, role, path):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": {ROLE: role}},
            "spec": {"config": {"ignition": {"version": "3.4.0"},
                                "storage": {"files": [{"path": path, "contents": {"source": "data:,x"}}]}}}}


def custom_pool(name, **spec):
    return {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": name},
            "spec": dict({"machineConfigSelector": {"matchExpressions": [
                {"key": ROLE, "operator": "In", "values": ["worker", name]}]},
                "nodeSelector": {"matchLabels": {f"node-role.kubernetes.io/{name}": ""}}}, **spec)}


def conditions(pool_obj):
    return {c["type"]: c for c in (pool_obj.get("status") or {}).get("conditions") or []}


# -- what a real MCO would show for the same Nodes ---------------------------------------------------

def get_mcp(kube):
    """``kubectl get mcp`` as {pool: {column: cell}} (AGE left out: it moves)."""
    lines = kube.kubectl("get", "mcp").stdout.strip().splitlines()
    head = lines[0].split()
    return {cells[0]: {h: c for h, c in zip(head, cells) if h in COLUMNS} for cells in map(str.split, lines[1:])}


def expected_row(kube, pool, config):
    """The row of ``kubectl get mcp`` calculateStatus gives ``pool`` for the Nodes as the API holds
    them now; ``config``: status.configuration before this sync (it becomes spec.configuration once
    every node is updated, ``allUpdated``)."""
    pools = {p["metadata"]["name"]: p for p in api(kube, f"{MCO}/machineconfigpools")["items"]}
    nodes = ref.nodes_for_pool(pools, pool, api(kube, "/api/v1/nodes")["items"])
    obj = pools[pool]
    rendering = conditions(obj).get("RenderDegraded", {}).get("status") == "True"
    st = ref.calculate_status(obj, nodes, rendering)
    conds = st["conditions"]
    return {"CONFIG": obj["spec"]["configuration"]["name"] if st["allUpdated"] else config,
            "UPDATED": conds["Updated"]["status"], "UPDATING": conds["Updating"]["status"],
            "DEGRADED": conds["Degraded"]["status"], "MACHINECOUNT": str(st["machineCount"]),
            "READYMACHINECOUNT": str(st["readyMachineCount"]), "UPDATEDMACHINECOUNT": str(st["updatedMachineCount"]),
            "DEGRADEDMACHINECOUNT": str(st["degradedMachineCount"])}, st, obj


# Ours on purpose (docs/kubernetes.md, "How this differs from the MCO": "Conditions carry reasons"):
# Updated and Updating carry a one-word reason, and Updated=False our count of nodes as its message.
OURS = {("Updated", "reason"), ("Updating", "reason")}


def same_conditions(obj, st):
    """The pool's conditions as calculateStatus writes them, but for OURS ("" when the same)."""
    have = conditions(obj)
    for kind, want in st["conditions"].items():
        for field in ("status", "reason", "message"):
            if (kind, field) in OURS or (kind, field) == ("Updated", "message") and want["status"] == "False":
                continue
            if have.get(kind, {}).get(field, "") != want[field]:
                return f"{kind}.{field}: {have.get(kind, {}).get(field)!r} != {want[field]!r}"
    return ""


def mcp_matches(kube, pool, config, whys=None):
    """(the row, "") once ``kubectl get mcp`` shows what calculateStatus computes (``whys``: each
    difference seen until then)."""
    want, st, obj = expected_row(kube, pool, config)
    have = get_mcp(kube).get(pool)
    why = same_conditions(obj, st) or ("" if have == want else f"get mcp {have} != {want}")
    if obj["status"].get("observedGeneration") != obj["metadata"]["generation"]:
        why = why or "observedGeneration behind"
    if why and whys is not None:
        whys.append(f"pool {pool}: {why}")
    return (have, why) if not why else None


def describe_node(kube, node):
    return {k: v for k, v in ref.describe_annotations(kube.kubectl("describe", "node", node).stdout).items()
            if k.startswith(MCD)}


def mcn_matches(kube, pools, node, failed=False):
    """The overlap of ``kubectl get mcn NODE -o yaml`` with what upstream derives from the Node:
    its pool (GetPrimaryPoolForNode), its configs (the MCD's annotations), Updated (IsNodeDone)
    and NodeDegraded: True from the daemon's Degraded write (``failed``: the node reported
    Degraded during this update) until the Updated write resets every other condition to False
    (upgrade_monitor.go generateAndApplyMachineConfigNodes); a Working retry leaves it True."""
    out = kube.kubectl("get", "machineconfignode", node, "-o", "yaml", check=False)
    if out.returncode != 0:
        return None
    mcn = yaml.safe_load(out.stdout)
    node_obj = api(kube, f"/api/v1/nodes/{node}")
    ann = node_obj["metadata"].get("annotations") or {}
    conds = {c["type"]: c["status"] for c in (mcn.get("status") or {}).get("conditions") or []}
    want = {"node": node, "pool": ref.primary_pool(pools, node_obj),
            "desired": ann.get(MCD + "desiredConfig"), "current": ann.get(MCD + "currentConfig"),
            "Updated": "True" if ref.is_node_done(node_obj) else "False",
            "NodeDegraded": "True" if failed or ann.get(MCD + "state") == "Degraded" else "False"}
    have = {"node": mcn["spec"]["node"]["name"], "pool": mcn["spec"]["pool"]["name"],
            "desired": (mcn.get("status") or {}).get("configVersion", {}).get("desired"),
            "current": (mcn.get("status") or {}).get("configVersion", {}).get("current"),
            "Updated": conds.get("Updated"), "NodeDegraded": conds.get("NodeDegraded")}
    return have if have == want else None


def pool_events(kube, pool):
    items = api(kube, "/api/v1/namespaces/node-config-server/events")["items"]
    return [(e["reason"], e["message"], e["source"].get("component")) for e in items
            if e["involvedObject"].get("kind") == "MachineConfigPool" and e["involvedObject"].get("name") == pool]


# -- the rollout ----------------------------------------------------------------------------------------

def test_oc_views_of_one_rollout_match_what_the_mcos_functions_compute_for_the_same_nodes(kube, server):
    """Two worker Nodes run node-agent; a master that also matches infra ("defaulting to master")
    and a Windows worker (in no pool) do not. A new worker MachineConfig rolls out one node at a
    time; one node fails (Degraded) before it succeeds. At each step every view equals what the
    upstream functions compute from the Nodes as the API holds them."""
    workers = ["oc-w0", "oc-w1"]
    for name in workers:
        create_node(kube, name, {W: ""})
    create_node(kube, "oc-m0", {M: "", INFRA: ""})
    create_node(kube, "oc-win", {W: "", "kubernetes.io/os": "windows"})
    pools = {p["metadata"]["name"]: p for p in api(kube, f"{MCO}/machineconfigpools")["items"]}
    a = wait_for(lambda: api(kube, f"{MCO}/machineconfigpools/worker").get("spec", {}).get("configuration", {})
                 .get("name"), "worker's spec.configuration written (the render controller's)")
    # What each Node's MCD annotations would be upstream, step by step (pkg/daemon/writer.go).
    mcd = {name: {} for name in workers}
    failed = set()  # nodes that reported Degraded during this update (their MCN's NodeDegraded stays True)
    for name in workers:
        report(server, name, "worker", "Done", a, a)
        mcd[name] = ref.mcd_write(ref.set_desired(mcd[name], a), "Done", a)

    def views_agree(config, why, unstarted=()):
        """Every view as upstream computes it (None, and the difference in ``why``, until then).
        ``unstarted``: a node targeted that has not reported since, whose MachineConfigNode is
        not compared (upstream's follows once the daemon has picked the new desired config up)."""
        for name in workers:
            have = describe_node(kube, name)
            if {k: have.get(k) for k in mcd[name]} != mcd[name] or MCD + "currentImage" in have:
                return why.append(f"describe node {name}: {have} != {mcd[name]}")
            if name not in unstarted and mcn_matches(kube, pools, name, name in failed) is None:
                return why.append(f"get mcn {name}: {kube.kubectl('get', 'machineconfignode', name, '-o', 'yaml').stdout}")
        found = mcp_matches(kube, "worker", config, why)
        return found

    def settle(config, what, unstarted=()):
        why = []
        try:
            return wait_for(lambda: views_agree(config, why, unstarted), what, 60)
        except pytest.fail.Exception:
            pytest.fail(f"{what}: {why[-1] if why else 'no view read'}")

    settle(a, "every view as upstream computes it, all Done on A")
    row = get_mcp(kube)
    assert (row["worker"]["MACHINECOUNT"], row["master"]["MACHINECOUNT"]) == ("2", "1")  # oc-win in none
    assert mcp_matches(kube, "master", api(kube, f"{MCO}/machineconfigpools/master")["status"]["configuration"]
                       ["name"]) is not None  # oc-m0: master's, never started (unavailable), as upstream counts it

    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(machine_config("99-worker-oc", "worker", "/etc/oc-b")))
    b = wait_for(lambda: (lambda n: n != a and n)(api(kube, f"{MCO}/machineconfigpools/worker")["spec"]
                                                  ["configuration"]["name"]), "B in worker's spec.configuration")
    source = api(kube, f"{MCO}/machineconfigpools/worker")["spec"]["configuration"]["source"]
    picked = sorted(m["metadata"]["name"] for m in api(kube, f"{MCO}/machineconfigs")["items"]
                    if ref.selects(pools["worker"]["spec"]["machineConfigSelector"], m["metadata"].get("labels") or {}))
    assert sorted(s["name"] for s in source) == picked == ["00-worker", "99-worker-oc"]
    assert {(s["kind"], s["apiVersion"]) for s in source} == {("MachineConfig", "machineconfiguration.openshift.io/v1")}

    def targeted(name):
        """The node controller's next candidate: its desiredConfig B, as getAllCandidateMachines
        picks it once a slot is free (maxUnavailable 25% of 2: one at a time)."""
        wait_for(lambda: (api(kube, f"/api/v1/nodes/{name}")["metadata"].get("annotations") or {}).get(
            MCD + "desiredConfig") == b, f"{name} targeted to B")
        mcd[name] = ref.set_desired(mcd[name], b)

    config = a
    for i, name in enumerate(workers):
        targeted(name)
        if i == 1:  # this one fails first: Degraded with its reason, then Working again (the reason stays)
            report(server, name, "worker", "Degraded", a, b, reason="rpm-ostree failed: disk full")
            mcd[name] = ref.mcd_write(mcd[name], "Degraded", reason="rpm-ostree failed: disk full")
            failed.add(name)
            settle(config, f"every view with {name} Degraded")
            assert get_mcp(kube)["worker"]["DEGRADED"] == "True"
        report(server, name, "worker", "Working", a, b)
        mcd[name] = ref.mcd_write(mcd[name], "Working")
        settle(config, f"every view with {name} Working")
        if i == 1:
            assert describe_node(kube, name)[MCD + "reason"] == "rpm-ostree failed: disk full"  # SetWorking kept it
        report(server, name, "worker", "Done", b, b)
        mcd[name] = ref.mcd_write(mcd[name], "Done", b)
        failed.discard(name)
        config = b if i == len(workers) - 1 else a
        following = workers[i + 1:i + 2]
        if following:
            targeted(following[0])  # its slot is free: the next node is targeted at once
        settle(config, f"every view with {name} Done on B", following)
    assert get_mcp(kube)["worker"]["CONFIG"] == b and get_mcp(kube)["worker"]["UPDATED"] == "True"
    status_conf = api(kube, f"{MCO}/machineconfigpools/worker")["status"]["configuration"]
    assert status_conf == api(kube, f"{MCO}/machineconfigpools/worker")["spec"]["configuration"]  # copied, source too

    events = wait_for(lambda: (lambda ev: ev if any(r == "Completed" and b in m for r, m, _ in ev) else None)(
        pool_events(kube, "worker")), "the Completed Event")
    lines = ref.pool_update_line_events("worker", b)
    assert ("Updating", lines["Updating"], "machineconfigcontroller-nodecontroller") in events
    assert ("Completed", lines["Completed"], "machineconfigcontroller-nodecontroller") in events
    for name in workers:
        assert ("SetDesiredConfig", ref.set_desired_event(name, b), "machineconfigcontroller-nodecontroller") in events
    assert [c for r, m, c in events if r == "RenderedConfigGenerated" and m.startswith(ref.rendered_event_prefix(b))] \
        == ["machineconfigcontroller-rendercontroller"]
    table = kube.kubectl("get", "events", "-n", "node-config-server").stdout
    assert "machineconfigpool/worker" in table and "RenderedConfigGenerated" in table and "Completed" in table


def test_a_paused_pool_waiting_on_a_new_rendering_counts_against_it(kube, server):
    """calculateStatus counts against spec.configuration, which the render controller moves while
    the pool is paused: UPDATED and READY 0, Updated and Updating False, "Pool is paused"."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(custom_pool("ocpause")))
    create_node(kube, "oc-p0", {W: "", "node-role.kubernetes.io/ocpause": ""})
    a = wait_for(lambda: (api(kube, f"{MCO}/machineconfigpools/ocpause").get("spec") or {}).get(
        "configuration", {}).get("name"), "ocpause rendered")
    report(server, "oc-p0", "ocpause", "Done", a, a)
    wait_for(lambda: mcp_matches(kube, "ocpause", a), "ocpause all Done, as calculateStatus computes it", 60)
    kube.kubectl("patch", "mcp", "ocpause", "--type", "merge", "-p", json.dumps({"spec": {"paused": True}}))
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(machine_config("60-ocpause", "ocpause", "/etc/paused")))
    wait_for(lambda: api(kube, f"{MCO}/machineconfigpools/ocpause")["spec"]["configuration"]["name"] != a,
             "the paused pool's new spec.configuration")
    row, _ = wait_for(lambda: mcp_matches(kube, "ocpause", a), "the paused pool as calculateStatus computes it", 60)
    assert (row["UPDATEDMACHINECOUNT"], row["READYMACHINECOUNT"], row["UPDATED"], row["UPDATING"]) == \
        ("0", "0", "False", "False")
    assert conditions(api(kube, f"{MCO}/machineconfigpools/ocpause"))["Updating"]["message"].startswith(
        "Pool is paused; will not update to MachineConfig rendered-ocpause-")


# -- pools the render controller cannot render ------------------------------------------------------

def render_degraded(kube, pool):
    cond = conditions(api(kube, f"{MCO}/machineconfigpools/{pool}")).get("RenderDegraded") or {}
    return cond if cond.get("status") == "True" else None


def test_an_invalid_pool_fails_only_its_own_sync_and_keeps_its_nodes(kube, server):
    """A maxUnavailable the CRD admits but upstream cannot read ("3"): RenderDegraded on that pool
    only, its Node still its own (not worker's), its status still written; the other pools untouched.
    Fixed, it clears."""
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(custom_pool("ocbad")))
    create_node(kube, "oc-b0", {W: "", "node-role.kubernetes.io/ocbad": ""})
    wait_for(lambda: get_mcp(kube).get("ocbad", {}).get("MACHINECOUNT") == "1", "ocbad counts oc-b0")
    for value in ("3", -1):
        kube.kubectl("patch", "mcp", "ocbad", "--type", "merge", "-p", json.dumps({"spec": {"maxUnavailable": value}}))
        cond = wait_for(lambda: render_degraded(kube, "ocbad"), f"ocbad RenderDegraded (maxUnavailable {value!r})")
        assert cond["message"].startswith("Failed to render configuration for pool ocbad: $.spec.maxUnavailable")
        assert cond["reason"] == "" and get_mcp(kube)["ocbad"]["DEGRADED"] == "True"
        assert get_mcp(kube)["ocbad"]["MACHINECOUNT"] == "1"
        assert "oc-b0" not in json.dumps(server.session().get(server.url("/api/v1/pools/worker")).json()["status"]
                                         ["nodes"])
        for other in ("worker", "master", "infra"):
            assert render_degraded(kube, other) is None, other
    kube.kubectl("patch", "mcp", "ocbad", "--type", "merge", "-p", json.dumps({"spec": {"maxUnavailable": 1}}))
    wait_for(lambda: render_degraded(kube, "ocbad") is None, "ocbad's RenderDegraded cleared")


def test_an_invalid_machineconfig_degrades_only_the_pools_that_select_it(kube, server):
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(custom_pool("ocmc")))
    before = wait_for(lambda: (api(kube, f"{MCO}/machineconfigpools/ocmc").get("spec") or {}).get(
        "configuration", {}).get("name"), "ocmc rendered")
    bad = machine_config("99-ocmc-bad", "ocmc", "relative/path")
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(bad))
    try:
        cond = wait_for(lambda: render_degraded(kube, "ocmc"), "ocmc RenderDegraded")
        assert cond["message"].startswith("Failed to render configuration for pool ocmc: ") and "99-ocmc-bad" in \
            cond["message"]
        assert api(kube, f"{MCO}/machineconfigpools/ocmc")["spec"]["configuration"]["name"] == before  # held
        for other in ("worker", "master", "infra"):
            assert render_degraded(kube, other) is None, other
    finally:
        kube.kubectl("delete", "machineconfig", "99-ocmc-bad")
    wait_for(lambda: render_degraded(kube, "ocmc") is None, "ocmc's RenderDegraded cleared")


def test_a_pool_selecting_no_machineconfig_is_render_degraded_and_its_nodes_wait(kube, server):
    """render_controller.go: "no MachineConfigs found matching selector <selector>"; nothing is
    rendered; a node asking for the config is told why (503)."""
    pool = custom_pool("ocempty", machineConfigSelector={"matchLabels": {ROLE: "ocempty"}})
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(pool))
    cond = wait_for(lambda: render_degraded(kube, "ocempty"), "ocempty RenderDegraded")
    assert cond["message"] == ("Failed to render configuration for pool ocempty: no MachineConfigs found matching "
                               "selector machineconfiguration.openshift.io/role=ocempty")
    obj = api(kube, f"{MCO}/machineconfigpools/ocempty")
    assert "configuration" not in obj["spec"] and obj["status"]["machineCount"] == 0
    r = server.session().get(server.url("/config/ocempty"), timeout=10)
    assert r.status_code == 503 and "no MachineConfigs found matching selector" in r.text
    for other in ("worker", "master", "infra"):
        assert render_degraded(kube, other) is None, other


@pytest.mark.cel
def test_every_pool_written_with_its_configuration_validates_against_the_crd(kube, server):
    """spec.configuration and status.configuration with their source, a RenderDegraded pool's
    status: each as the API server stores it, against the MachineConfigPool CRD (schema and CEL)."""
    from tests.helpers import crd_validate

    for name in ("master", "worker", "infra"):
        obj = wait_for(lambda: (lambda o: o if (o.get("spec") or {}).get("configuration", {}).get("source") and  # noqa
                                (o.get("status") or {}).get("configuration", {}).get("source") is not None
                                else None)(api(kube, f"{MCO}/machineconfigpools/{name}")),  # noqa: B023
                       f"{name}'s spec and status configuration")
        assert crd_validate.problems(obj) == [], name
    kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(custom_pool(
        "occrd", machineConfigSelector={"matchLabels": {ROLE: "occrd"}})))
    wait_for(lambda: render_degraded(kube, "occrd"), "occrd RenderDegraded")
    assert crd_validate.problems(api(kube, f"{MCO}/machineconfigpools/occrd")) == []
