"""A pool's alert gate (agent/server/rollout/alertgate.py) and its pattern
(agent/server/rollout/alertregex.py): the annotations' parsing, the alerts API's answer, and whether
the pool holds and what it says; all pure."""

import itertools
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.rollout import alertgate
from agent.server.rollout.alertgate import (
    ANNOTATION,
    NO_URL,
    UNREACHABLE,
    AlertGateInvalid,
    AlertsUnreadable,
    Firing,
    firing_names,
    parse,
    parse_answer,
    state,
)
from agent.server.rollout.alertregex import MAX_PATTERN, Pattern, PatternInvalid


def pool_with(**annotations) -> dict:
    return {"metadata": {"name": "worker", "annotations": annotations}}


def answer(*alerts) -> dict:
    return {"status": "success", "data": {"alerts": [
        {"labels": {"alertname": name, "severity": "critical"}, "annotations": {}, "state": s,
         "activeAt": "2026-11-29T14:00:00Z", "value": "1e+00"} for name, s in alerts]}}


# -- the pattern ---------------------------------------------------------------------------------

@pytest.mark.parametrize("pattern,name,matches", [
    ("KubeNodeNotReady", "KubeNodeNotReady", True),
    ("Kube", "KubeNodeNotReady", False),  # anchored at both ends, as Prometheus's =~
    ("Kube.*", "KubeNodeNotReady", True),
    (".*NotReady", "KubeNodeNotReady", True),
    ("^Etcd.*$", "EtcdMembersDown", True),
    ("Etcd(?:Members|Quorum)Down|Node.*", "EtcdQuorumDown", True),
    ("Etcd(Members|Quorum)Down", "EtcdLeaderDown", False),
    ("[A-Z][a-z]+Down", "HostDown", True),
    ("[^X]+", "HostXDown", False),
    ("Disk\\d+Full", "Disk12Full", True),
    ("a\\.b", "axb", False),
    ("a\\$", "a$", True),
    ("Watchdog?", "Watchdo", True),
])
def test_a_pattern_matches_a_whole_alert_name(pattern, name, matches):
    assert Pattern(pattern).fullmatch(name) is matches


@pytest.mark.parametrize("pattern,words", [
    ("(Kube", "at character 6: a group is not closed"),
    ("Kube)", "')' closes no group"),
    ("Kube**", "repeats a repetition"),
    ("*Kube", "'*' repeats nothing"),
    ("Kube{2}", "counted repetition {m,n} is not supported"),
    ("(?i)kube", "no flags such as (?i)"),
    ("(a)\\1", "at character 4: \\1 is not supported"),
    ("[z-a]", "the range z-a is backwards"),
    ("[abc", "a character class is not closed"),
    ("Ku^be", "'^' is allowed only at the very start"),
    ("x" * (MAX_PATTERN + 1), f"at most {MAX_PATTERN}"),
])
def test_a_pattern_it_cannot_read_is_refused_with_where_and_what_to_write(pattern, words):
    with pytest.raises(PatternInvalid, match=re.escape(words)):
        Pattern(pattern)


def test_a_pattern_that_makes_pythons_re_backtrack_for_ever_is_matched_in_linear_steps():
    # (a+)+b against a run of a's: Python's re takes 2**n steps; the automaton n * len(pattern)
    assert Pattern("(a+)+b").fullmatch("a" * 2000) is False
    assert Pattern("(.*)*(.*)*X").fullmatch("a" * 2000) is False


ATOMS = st.sampled_from(["a", "b", ".", "[ab]", "[^a]", "\\d", "(a|b)", "(?:ab|)", "()", "\\."])
REPEATS = ["", "", "*", "+", "?", "*?"]


@st.composite
def patterns(draw, depth=0):
    """Patterns of the subset both engines read, with the same meaning in both. Only an atom of
    the outer level repeats without bound: the oracle, Python's re, backtracks through every way
    repetitions of drawn groups can split a name (a drawn ``((b+(a|b)*?\\.*|.)*(()*?[^a]*\\.*|)*
    ...)*?`` held it for minutes on 8 characters); those are checked by name below."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        drawn_group = not (depth >= 2 or draw(st.booleans()))
        atom = f"({draw(patterns(depth=depth + 1))})" if drawn_group else draw(ATOMS)
        parts.append(atom + draw(st.sampled_from(["", "?"] if depth or drawn_group else REPEATS)))
    alternatives = ["".join(parts)]
    if draw(st.booleans()):
        alternatives.append(draw(st.text("ab.", max_size=3)))
    return "|".join(alternatives)


@settings(max_examples=400, deadline=None)
@given(patterns(), st.text("ab1.x", max_size=8))
def test_a_pattern_matches_what_pythons_re_fullmatch_matches(pattern, name):
    assert Pattern(pattern).fullmatch(name) is bool(re.fullmatch(pattern, name)), pattern


SHORT_NAMES = ["".join(chars) for n in range(5) for chars in itertools.product("ab.", repeat=n)]


@pytest.mark.parametrize("pattern", ["((a|b)*)*", "(a*b*)*", "((?:ab|)*)+", "(a+)+b?", "(.*)*(.*)*a", "(a|b.)*",
                                     "(ab?)+\\.", "((a|b)?\\.)*b", "(a*|b)*?a",
                                     "((a|b)*?\\.*|.)*", "(()*?[^a]*\\.*|)*", "((a?)+b*)*?\\.?"])
def test_a_pattern_with_nested_repetitions_matches_what_pythons_re_matches_on_every_short_name(pattern):
    compiled = Pattern(pattern)
    assert [n for n in SHORT_NAMES if compiled.fullmatch(n)] == [n for n in SHORT_NAMES if re.fullmatch(pattern, n)]


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=300), st.text("()[]{}^$|*+?\\.-aZ09:", max_size=300)))
def test_parsing_a_gate_ends_on_any_text_and_raises_only_its_own_error(text):
    try:
        gate = parse(text)
    except AlertGateInvalid as exc:
        assert str(exc).startswith(f"annotation {ANNOTATION}: ")
        return
    gate.pattern.fullmatch("KubeNodeNotReady" * 4)


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["status", "data", "alerts", "labels", "alertname", "state", "error"]),
                        inner, max_size=4), max_leaves=30))
def test_reading_an_answer_ends_on_any_json_and_raises_only_its_own_error(doc):
    try:
        names = parse_answer(json.dumps(doc).encode())
    except AlertsUnreadable:
        return
    assert list(names) == sorted(set(names))


# -- the answer ----------------------------------------------------------------------------------

def test_only_firing_alerts_are_read_pending_ones_do_not_gate():
    doc = answer(("KubeNodeNotReady", "firing"), ("EtcdMembersDown", "pending"), ("KubeNodeNotReady", "firing"),
                 ("Watchdog", "firing"))
    assert firing_names(doc) == ("KubeNodeNotReady", "Watchdog")


@pytest.mark.parametrize("body,words", [
    (b"<html>login</html>", "not JSON"),
    (b'{"status": "error", "error": "bad_data"}', "status 'error': bad_data"),
    (b'[{"labels": {"alertname": "X"}}]', "not a JSON object"),  # an Alertmanager's /api/v2/alerts
    (b'{"status": "success", "data": {"groups": []}}', "data.alerts is not a list"),
])
def test_an_answer_that_is_not_prometheuss_alerts_list_says_what_it_is(body, words):
    with pytest.raises(AlertsUnreadable, match=re.escape(words)):
        parse_answer(body)


# -- the pool's state ----------------------------------------------------------------------------

def test_a_pool_without_the_annotation_has_no_gate_and_asks_nothing():
    assert state(pool_with(), None) == ("", None)
    assert not alertgate.gated(pool_with(**{UNREACHABLE: "proceed"}))


def test_a_matching_firing_alert_holds_the_pool_which_names_it():
    hold, record = state(pool_with(**{ANNOTATION: "Kube.*|Etcd.*"}),
                         Firing(("EtcdMembersDown", "KubeNodeNotReady", "Watchdog")))
    assert hold == ("alerts fire that the pool's alert gate (Kube.*|Etcd.*) waits for: EtcdMembersDown, "
                    "KubeNodeNotReady; nothing is newly targeted until they stop")
    assert record == {"pattern": "Kube.*|Etcd.*", "holding": True, "firing": ["EtcdMembersDown", "KubeNodeNotReady"],
                      "count": 2}


def test_a_pool_names_at_most_ten_alerts_and_counts_them_all():
    names = tuple(f"Alert{i:02d}" for i in range(25))
    hold, record = state(pool_with(**{ANNOTATION: "Alert.*"}), Firing(names))
    assert record["count"] == 25 and record["firing"] == list(names[:10])
    assert hold.endswith("Alert09 and 15 more; nothing is newly targeted until they stop")


def test_no_matching_alert_lets_the_pool_go_on_and_says_none_fires():
    assert state(pool_with(**{ANNOTATION: "Kube.*"}), Firing(("Watchdog",))) == \
        ("", {"pattern": "Kube.*", "holding": False, "firing": [], "count": 0})


def test_a_prometheus_that_does_not_answer_holds_the_pool_and_says_how_to_go_on_without_it():
    hold, record = state(pool_with(**{ANNOTATION: "Kube.*"}), Firing(unanswered="GET u: no answer within 5 s"))
    assert hold == ("the pool's alert gate (Kube.*) cannot tell whether an alert fires, so nothing is newly targeted "
                    "(fail closed): Prometheus did not answer: GET u: no answer within 5 s (annotate the pool "
                    f"{UNREACHABLE}=proceed to go on without it)")
    assert record == {"pattern": "Kube.*", "unanswered": "Prometheus did not answer: GET u: no answer within 5 s",
                      "holding": True}


def test_the_unreachable_override_lets_the_rollout_go_on_and_the_pool_still_says_prometheus_did_not_answer():
    hold, record = state(pool_with(**{ANNOTATION: "Kube.*", UNREACHABLE: "Proceed"}), Firing(unanswered="refused"))
    assert hold == ""
    assert record == {"pattern": "Kube.*", "unanswered": "Prometheus did not answer: refused", "holding": False,
                      "override": f"{UNREACHABLE}: proceed"}
    # the override is for an unreachable Prometheus only: a firing alert still holds
    assert state(pool_with(**{ANNOTATION: "Kube.*", UNREACHABLE: "proceed"}), Firing(("KubeX",)))[1]["holding"]


def test_a_gated_pool_on_a_server_without_a_prometheus_url_holds_and_the_override_does_not_lift_it():
    hold, record = state(pool_with(**{ANNOTATION: "Kube.*", UNREACHABLE: "proceed"}), None)
    assert NO_URL in hold and record == {"pattern": "Kube.*", "unanswered": NO_URL, "holding": True}


def test_before_serve_forks_its_workers_a_gated_pool_holds_unasked_and_the_override_does_not_lift_it():
    hold, record = state(pool_with(**{ANNOTATION: "Kube.*", UNREACHABLE: "proceed"}),
                         Firing(unanswered="not asked yet: the server is starting", starting=True))
    assert hold.endswith("nothing is newly targeted (fail closed): not asked yet: the server is starting")
    assert record == {"pattern": "Kube.*", "unanswered": "not asked yet: the server is starting", "holding": True}


@pytest.mark.parametrize("annotations,words", [
    ({ANNOTATION: "Kube(.*"}, f"annotation {ANNOTATION}: 'Kube(.*' is not a pattern this server reads: at "
                              f"character 8: a group is not closed"),
    ({ANNOTATION: "  "}, f"annotation {ANNOTATION}: the value is empty"),
    ({ANNOTATION: "Kube.*", UNREACHABLE: "maybe"}, f"annotation {UNREACHABLE}: 'maybe' is not hold or proceed"),
])
def test_an_invalid_annotation_holds_the_pool_fail_closed_and_names_the_annotation(annotations, words):
    hold, record = state(pool_with(**annotations), Firing(()))
    assert hold.startswith("the pool's alert gate is invalid, so nothing is newly targeted until it is fixed: ")
    assert record["holding"] and record["invalid"].startswith(words), record
