"""Property tests (hypothesis) for the pure core: parse, merge, diff/plan, data URLs, and the
apply engine's "plan(A, B) applied to A gives B" on real scratch roots.

Generated configs are small on purpose (a handful of files under /etc/x/, contents from a small
alphabet, modes from a small set) so that collisions, equal files and mode-only changes are
common, which is where diff/merge/apply bugs hide; ``max_examples`` stays modest to keep the
suite quick on 2 cores.
"""

import base64
import json
import os
import tempfile
import urllib.parse
from typing import Dict, Tuple

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.core.diff import diff
from agent.core.disruption import NONE, plan_disruption
from agent.core.loadconfig import load_node_config
from agent.core.nodeconfig import NodeConfig
from agent.host.root import Root
from agent.ignition.dataurl import decode_data_url
from agent.ignition.merge import merge_ignition
from agent.ignition.parse import parse_document
from agent.ignition.validate import errors_of, validate_ignition
from agent.node.apply import apply_config

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
APPLY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

PATHS = ["/etc/x/a", "/etc/x/b", "/etc/x/c.conf", "/etc/x/sub/d", "/etc/x/sub/e"]
MODES = [0o644, 0o600, 0o755, 0o400]
TEXT = st.text(alphabet="ab \n=é", max_size=12)

# path -> (contents, mode)
Files = Dict[str, Tuple[str, int]]


def data_url(text: str, b64: bool) -> str:
    raw = text.encode("utf-8")
    if b64:
        return "data:;base64," + base64.b64encode(raw).decode("ascii")
    return "data:," + urllib.parse.quote(raw, safe="")


@st.composite
def file_sets(draw) -> Files:
    paths = draw(st.lists(st.sampled_from(PATHS), unique=True, max_size=len(PATHS)))
    return {p: (draw(TEXT), draw(st.sampled_from(MODES))) for p in paths}


@st.composite
def ignitions(draw) -> dict:
    files = draw(file_sets())
    return ignition_of(files, b64=draw(st.booleans()))


def ignition_of(files: Files, b64: bool = False) -> dict:
    cfg: dict = {"ignition": {"version": "3.4.0"}}
    if files:
        cfg["storage"] = {"files": [
            {"path": p, "mode": m, "contents": {"source": data_url(c, b64)}} for p, (c, m) in sorted(files.items())
        ]}
    return cfg


def node(files: Files, name: str, b64: bool = False) -> NodeConfig:
    return NodeConfig(ignition=ignition_of(files, b64), name=name)


# --- parse / validate ----------------------------------------------------------------------------

@FAST
@given(ignitions())
def test_generated_configs_are_valid_and_round_trip_through_json_and_yaml(cfg):
    assert errors_of(validate_ignition(cfg)) == []
    assert parse_document(json.dumps(cfg)) == cfg
    import yaml

    assert parse_document(yaml.safe_dump(cfg)) == cfg
    assert load_node_config(json.dumps(cfg).encode()).ignition == cfg


# --- merge ---------------------------------------------------------------------------------------

@FAST
@given(ignitions())
def test_merge_is_idempotent_and_empty_is_identity(cfg):
    assert merge_ignition(cfg, cfg) == cfg
    assert merge_ignition({}, cfg) == cfg
    assert merge_ignition(cfg, {}) == cfg


@FAST
@given(file_sets(), file_sets())
def test_merge_child_wins_and_keeps_every_path(parent, child):
    merged = merge_ignition(ignition_of(parent), ignition_of(child))
    got = {f["path"]: f for f in merged.get("storage", {}).get("files", [])}
    assert set(got) == set(parent) | set(child)
    for path, (text, mode) in child.items():
        assert got[path]["mode"] == mode
        assert decode_data_url(got[path]["contents"]["source"]) == text.encode()
    for path in set(parent) - set(child):
        assert decode_data_url(got[path]["contents"]["source"]) == parent[path][0].encode()
    assert errors_of(validate_ignition(merged)) == []


@FAST
@given(ignitions(), ignitions())
def test_merge_does_not_modify_its_inputs(a, b):
    a_before, b_before = json.dumps(a, sort_keys=True), json.dumps(b, sort_keys=True)
    merge_ignition(a, b)
    assert json.dumps(a, sort_keys=True) == a_before and json.dumps(b, sort_keys=True) == b_before


# --- data URLs -----------------------------------------------------------------------------------

@FAST
@given(st.binary(max_size=64))
def test_data_url_round_trip_base64_and_percent(raw):
    assert decode_data_url("data:;base64," + base64.b64encode(raw).decode()) == raw
    assert decode_data_url("data:application/octet-stream;base64," + base64.b64encode(raw).decode()) == raw
    assert decode_data_url("data:," + urllib.parse.quote(raw, safe="")) == raw


# --- diff / plan ---------------------------------------------------------------------------------

@FAST
@given(file_sets(), st.booleans(), st.booleans())
def test_plan_of_a_config_against_itself_is_none(files, b64_a, b64_b):
    # The same contents spelled differently (base64 vs percent-encoding) is no change either.
    a, a2 = node(files, "a", b64_a), node(files, "a2", b64_b)
    assert diff(a, a2).empty
    plan = plan_disruption(a, a2)
    assert [x.type for x in plan.actions] == [NONE]
    assert not plan.reboot and not plan.drain
    assert plan.to_dict()["changes"]["files"] == []


@FAST
@given(file_sets(), file_sets())
def test_plan_reports_exactly_the_paths_that_differ(fa, fb):
    changed = {c.path: c for c in diff(node(fa, "a"), node(fb, "b")).files}
    expect = {p for p in set(fa) | set(fb) if fa.get(p) != fb.get(p)}
    assert set(changed) == expect
    for path, change in changed.items():
        if path not in fb:
            assert change.change == "removed"
        elif path not in fa:
            assert change.change == "added"
        else:
            want = {"contents"} if fa[path][0] != fb[path][0] else set()
            want |= {"mode"} if fa[path][1] != fb[path][1] else set()
            assert set(change.fields) == want
    plan = plan_disruption(node(fa, "a"), node(fb, "b"))
    # /etc/x/* has no policy entry: any change needs a reboot, no change needs nothing.
    assert plan.reboot == bool(expect)


# --- apply: plan(A, B) applied at A gives B --------------------------------------------------------

def snapshot(top: str, under: str = "etc") -> Dict[str, Tuple[bytes, int]]:
    out = {}
    base = os.path.join(top, under)
    for dirpath, _dirs, names in os.walk(base):
        for name in names:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out["/" + os.path.relpath(full, top)] = (f.read(), os.stat(full).st_mode & 0o7777)
    return out


def expected_tree(files: Files) -> Dict[str, Tuple[bytes, int]]:
    return {p: (c.encode("utf-8"), m) for p, (c, m) in files.items()}


@APPLY
@given(file_sets(), file_sets(), st.booleans())
def test_apply_b_over_a_equals_fresh_apply_of_b(fa, fb, b64):
    a, b = node(fa, "a", b64), node(fb, "b", not b64)
    with tempfile.TemporaryDirectory() as over, tempfile.TemporaryDirectory() as fresh:
        apply_config(Root(over), a)
        assert snapshot(over) == expected_tree(fa)
        result = apply_config(Root(over), b, previous=a)
        apply_config(Root(fresh), b)
        assert snapshot(over) == snapshot(fresh) == expected_tree(fb)
        # what apply says it touched is what the plan says changed (no more, no less)
        planned = {c.path for c in diff(a, b).files}
        assert set(result.changed_paths) == planned
        # and applying B again changes nothing
        again = apply_config(Root(over), b, previous=b)
        assert again.changed == [] and snapshot(over) == expected_tree(fb)
