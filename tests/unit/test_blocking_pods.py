"""A pool's blocking pods (ours; agent/server/rollout/blockingpods.py, the skip in candidates.py and
targeting.py): the selector annotation's parsing (Kubernetes label selector syntax), which pods
count (kured's: bound, not Succeeded/Failed/Unknown), and that a candidate running one is skipped
without holding a slot while the next one goes, and a node already targeted goes on."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.core.rolloutpolicy import RolloutPolicy
from agent.server.cli import rolloutview
from agent.server.cluster import podblockers
from agent.server.rollout import blockingpods, progress, rolloutstatus, targeting
from agent.server.rollout.blockingpods import ANNOTATION, SelectorInvalid, parse
from agent.server.rollout.targeting import Member

A, B = "rendered-worker-a", "rendered-worker-b"
UPSTREAM = RolloutPolicy()


def done(config):
    return {"state": "Done", "currentConfig": config, "desiredConfig": config}


def fleet(n):
    return [Member(f"w{i}", done(A), created=float(i)) for i in range(n)]


def pod(name, node, phase="Running", namespace="jobs", **labels):
    return {"metadata": {"namespace": namespace, "name": name, "labels": labels or {"app": "batch"}},
            "spec": {"nodeName": node}, "status": {"phase": phase}}


# -- the selector ---------------------------------------------------------------------------------

@pytest.mark.parametrize("text,canonical", [
    ("app=batch", "app=batch"),
    ("app==batch , tier!=web", "app=batch,tier!=web"),
    ("app in (backup, batch),!keep", "app in (backup,batch),!keep"),
    ("example.com/role notin (in,notin)", "example.com/role notin (in,notin)"),
    ("gpu", "gpu"),
    ("priority>5,priority<10", "priority>5,priority<10"),
    ("owner=", "owner="),
])
def test_the_selector_takes_kubernetes_label_selector_syntax_and_is_given_to_the_api_server_as_parsed(
        text, canonical):
    assert parse(text).text() == canonical


@pytest.mark.parametrize("text,where,words", [
    ("", "", "the value is empty, which would match every pod"),
    ("app in ()", "at character 9 (')')", "'in' and 'notin' need at least one value"),
    ("app=batch=x", "at character 10 ('=x')", "expected ',' or the end after a requirement"),
    ("!app=batch", "at character 5 ('=batch')", "'!app' stands alone"),
    ("app,", "at character 5 (the end)", "expected a requirement after ','"),
    ("app (batch)", "at character 5 ('(batch)')", "expected an operator"),
    ("app in (a b)", "at character 11 ('b)')", "expected ',' or ')' after a value"),
    ("Bad_Prefix/app=x", "at character 1", "its prefix must be a DNS subdomain"),
    ("app=" + "v" * 64, "at character 5", "is not a label value"),
    ("priority>high", "at character 10 ('high')", "'high' is not an integer"),
    ("in=x", "at character 1 ('in=x')", "expected a label key"),
    ("x" * 2001, "", "the value is 2001 characters long"),
])
def test_an_invalid_selector_names_the_annotation_the_position_and_what_to_give(text, where, words):
    with pytest.raises(SelectorInvalid) as got:
        parse(text)
    message = str(got.value)
    assert message.startswith(f"annotation {ANNOTATION}: {where}"), message
    assert words in message and 'docs/rollout.md, "Blocking pods (ours)"' in message, message


SELECTOR_CHARS = st.text(alphabet="ab/.-_=!(), <>0123456789in", max_size=60)


@settings(max_examples=400, deadline=None)
@given(st.one_of(SELECTOR_CHARS, st.text(max_size=300), st.integers(), st.none()))
def test_parse_ends_on_any_value_with_a_selector_or_its_own_error(value):
    try:
        got = parse(value)
    except SelectorInvalid as exc:
        assert str(exc).startswith(f"annotation {ANNOTATION}: ")
    else:
        assert parse(got.text()) == got  # what the API server is given reads back the same


KEYS = st.sampled_from(["app", "tier", "example.com/team"])
VALUES = st.sampled_from(["batch", "web", "1", "7", "x-y"])
REQUIREMENT = st.one_of(
    st.tuples(KEYS, st.sampled_from(["=", "==", "!="]), VALUES.map(lambda v: [v])),
    st.tuples(KEYS, st.sampled_from(["in", "notin"]), st.lists(VALUES, min_size=1, max_size=3)),
    st.tuples(KEYS, st.sampled_from(["", "!"]), st.just([])),
    st.tuples(KEYS, st.sampled_from([">", "<"]), st.sampled_from(["0", "3", "9"]).map(lambda v: [v])),
)


def restated(req, labels):
    """labels.Requirement.Matches, re-stated from k8s.io/apimachinery pkg/labels/selector.go."""
    key, op, values = req
    if op == "":
        return key in labels
    if op == "!":
        return key not in labels
    if op in ("=", "==", "in"):
        return labels.get(key) in values
    if op in ("!=", "notin"):
        return labels.get(key) not in values
    if key not in labels or not labels[key].isdigit():
        return False
    return int(labels[key]) > int(values[0]) if op == ">" else int(labels[key]) < int(values[0])


def written(req):
    key, op, values = req
    if op in ("", "!"):
        return op + key
    if op in ("in", "notin"):
        return f"{key} {op} ({', '.join(values)})"
    return f"{key}{op}{values[0]}"


@settings(max_examples=300, deadline=None)
@given(st.lists(REQUIREMENT, min_size=1, max_size=4), st.dictionaries(KEYS, VALUES, max_size=3))
def test_a_selector_matches_the_labels_every_requirement_matches_as_kubernetes_reads_them(reqs, labels):
    selector = parse(",".join(written(r) for r in reqs))
    assert selector.matches(labels) == all(restated(r, labels) for r in reqs)


# -- which pods count -----------------------------------------------------------------------------------

def test_a_pod_blocks_its_node_while_bound_and_not_ended_and_matching_as_kured_counts_it():
    pods = [pod("a", "w0"), pod("p", "w0", "Pending"), pod("z", "w1", "Succeeded"), pod("f", "w1", "Failed"),
            pod("u", "w1", "Unknown"), pod("unbound", ""), pod("web", "w2", app="web"),
            pod("b", "w2", namespace="other")]
    assert blockingpods.blocking_by_node(parse("app=batch"), pods) == {"w0": ["jobs/a", "jobs/p"], "w2": ["other/b"]}


# -- targeting ----------------------------------------------------------------------------------------

def test_a_candidate_running_a_blocking_pod_waits_named_and_the_next_one_goes_then_it_goes_in_its_turn():
    nodes = fleet(3)
    got = targeting.step(nodes, {}, B, None, 1, UPSTREAM, "", 1.0, {"w0": ["jobs/a"]})
    assert got.targeted == ["w1"] and got.blocked == ["w0"]
    assert "blocking pods run on them, so not targeted while they do (the next nodes go): w0 (jobs/a)" in got.waiting
    nodes = [Member(m.name, done(B) if m.name == "w1" else m.report, created=m.created) for m in nodes]
    got = targeting.step(nodes, got.rollout, B, None, 1, UPSTREAM, "", 2.0, {"w0": ["jobs/a"]})
    assert got.targeted == ["w2"]
    nodes = [Member(m.name, done(B) if m.name == "w2" else m.report, created=m.created) for m in nodes]
    got = targeting.step(nodes, got.rollout, B, None, 1, UPSTREAM, "", 3.0, {})  # the pod is gone
    assert got.targeted == ["w0"] and got.blocked == [] and "blocking" not in got.waiting


def test_a_node_waiting_for_its_blocking_pods_holds_no_slot_of_max_unavailable():
    got = targeting.step(fleet(3), {}, B, None, 2, UPSTREAM, "", 1.0, {"w0": ["jobs/a"]})
    assert got.targeted == ["w1", "w2"]


def test_a_node_targeted_before_a_blocking_pod_came_is_not_untargeted_it_finishes():
    first = targeting.step(fleet(2), {}, B, None, 1, UPSTREAM, "", 1.0)
    assert first.targeted == ["w0"]
    got = targeting.step(fleet(2), first.rollout, B, None, 1, UPSTREAM, "", 2.0, {"w0": ["jobs/a"]})
    assert got.rollout["targets"]["w0"]["config"] == B and got.targeted == [] and got.blocked == []
    assert rolloutstatus.node_state(fleet(2)[0], got.rollout, B, None)[0] == "Updating"


def test_the_nodes_row_and_the_pool_name_its_pods_and_the_record_is_bounded():
    many = {"w0": [f"jobs/p{i}" for i in range(8)]}
    got = targeting.step(fleet(2), {}, B, None, 1, UPSTREAM, "", 1.0, many)
    blocking = podblockers.Blocking("", many, {"selector": "app=batch"})
    podblockers.attach(got.rollout, blocking, got.blocked)
    record = got.rollout["blockingPods"]
    assert record == {"selector": "app=batch", "waiting": 1,
                      "nodes": {"w0": ["jobs/p0", "jobs/p1", "jobs/p2", "jobs/p3", "jobs/p4", "and 3 more"]}}
    state, why = rolloutstatus.node_state(fleet(2)[0], got.rollout, B, None)
    assert state == "Waiting" and why.startswith(
        "blocking pod(s) jobs/p0, jobs/p1, jobs/p2, jobs/p3, jobs/p4 and 3 more run on it (the pool's "
        f"{ANNOTATION} 'app=batch' matches them): it is not targeted while they run"), why
    summary = rolloutstatus.summary(fleet(2), got.rollout, B, None, 1, 1.0)
    status = {"rollout": summary}
    lines = rolloutview.blocking_pods_lines(status)
    assert lines[0] == ("Blocking pods:       selector 'app=batch': 1 node(s) wait for their pods (the next nodes "
                        "go in their place)")
    assert lines[1] == "  w0: jobs/p0, jobs/p1, jobs/p2, jobs/p3, jobs/p4 and 3 more", lines


def test_an_invalid_selector_holds_the_pool_and_on_the_directory_backend_a_valid_one_says_it_has_no_effect():
    class Directory:  # a Cluster without the Kubernetes backend's drainer
        drainer = None

    bad = podblockers.read(Directory(), {"metadata": {"annotations": {ANNOTATION: "app in ()"}}})
    assert bad.hold.startswith("the pool's blocking-pod selector is invalid, so nothing is newly targeted until it "
                               f"is fixed: annotation {ANNOTATION}: at character 9")
    good = podblockers.read(Directory(), {"metadata": {"annotations": {ANNOTATION: "app=batch"}}})
    assert good.hold == "" and good.record == {"selector": "app=batch", "ignored": podblockers.NO_PODS}
    assert podblockers.read(Directory(), {"metadata": {}}).record is None
    rollout = {}
    podblockers.attach(rollout, bad, [])
    status = {"rollout": {"blockingPods": rollout["blockingPods"]}}
    assert rolloutview.blocking_pods_lines(status)[0].startswith("Blocking pods:       INVALID, nothing is newly "
                                                                  "targeted until it is fixed: annotation")
    pools = [{"metadata": {"name": "worker"}, "status": status}]
    assert rolloutview.blocking_pods_holds(pools)[0].startswith("worker: blocking-pod selector INVALID")
    podblockers.attach(rollout, good, [])
    assert rolloutview.blocking_pods_lines({"rollout": rollout}) == [
        f"Blocking pods:       selector 'app=batch': {podblockers.NO_PODS}"]


def test_node_config_server_status_names_the_nodes_waiting_for_blocking_pods():
    view = {"spec": {"configuration": {"name": B}},
            "status": {"configuration": {"name": A}, "machineCount": 2, "updatedMachineCount": 1,
                       "readyMachineCount": 1, "degradedMachineCount": 0, "conditions": [],
                       "rollout": {"blockingPods": {"selector": "app=batch", "waiting": 1,
                                                    "nodes": {"w0": ["jobs/a"]}}}}}
    assert "blocking pods: 1 node(s) wait while pods matching 'app=batch' run on them (w0)" in \
        progress.pool_blocking("worker", view)


def test_a_failed_list_of_pods_holds_the_pools_new_targeting_and_says_why_as_kured_blocks_on_a_query_error():
    from agent.server.store.kube.client import KubeUnavailable

    class Away:  # the Kubernetes backend's drainer, its API server unreachable
        class client:  # noqa: N801
            @staticmethod
            def list(path, params=None, transform=None):
                assert (path, params) == ("/api/v1/pods", {"labelSelector": "app=batch", "fieldSelector": (
                    "status.phase!=Succeeded,status.phase!=Failed,status.phase!=Unknown")})
                raise KubeUnavailable("GET /api/v1/pods: API server https://api:6443 unreachable: ConnectionError")

    cluster = type("Cluster", (), {"drainer": Away()})()
    got = podblockers.read(cluster, {"metadata": {"annotations": {ANNOTATION: "app==batch"}}})
    assert got.hold.startswith("the pods matching the pool's blocking-pod selector 'app=batch' could not be listed, "
                               "so nothing is newly targeted until they can"), got.hold
    assert got.record["unavailable"].endswith("unreachable: ConnectionError")
    decision = targeting.step(fleet(2), {}, B, None, 1, UPSTREAM, got.hold, 1.0, got.nodes)
    assert decision.targeted == [] and decision.waiting.startswith("the pods matching")
    status = {"rollout": {"blockingPods": got.record}}
    assert rolloutview.blocking_pods_holds([{"metadata": {"name": "worker"}, "status": status}]) == [
        f"worker: blocking pods could not be listed, nothing is newly targeted: {got.record['unavailable']}"]
