"""The linear-time render merge (agent/server/rollout/render.py ``_Merger``) gives exactly what the
copy-per-merge reference gives, on generated configs; and it never aliases its inputs."""

import copy
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from agent.server.rollout import render
from agent.server.rollout.render import _KEYED_LISTS, NEWEST_SPEC, merge_machine_configs


def _reference_merge(path, parent, child):
    """The merge as it was before (one copy of the accumulated config per MachineConfig)."""
    if isinstance(parent, dict) and isinstance(child, dict):
        out = dict(parent)
        for key, value in child.items():
            out[key] = _reference_merge(path + (key,), parent[key], value) if key in parent else copy.deepcopy(value)
        return out
    if isinstance(parent, list) and isinstance(child, list):
        key = _KEYED_LISTS.get(path)
        if key:
            out = [copy.deepcopy(p) for p in parent]
            index = {item.get(key): i for i, item in enumerate(out) if isinstance(item, dict)}
            for item in child:
                k = item.get(key) if isinstance(item, dict) else None
                if k is not None and k in index:
                    out[index[k]] = _reference_merge(path, out[index[k]], item)
                else:
                    index[k] = len(out)
                    out.append(copy.deepcopy(item))
            return out
        out = list(parent)
        for item in child:
            if item not in out:
                out.append(copy.deepcopy(item))
        return out
    return copy.deepcopy(child)


def reference(configs):
    ignition = {"ignition": {"version": NEWEST_SPEC}}
    for cfg in configs:
        ignition = _reference_merge((), ignition, cfg)
        ignition.setdefault("ignition", {})["version"] = NEWEST_SPEC
    return ignition


paths = st.sampled_from(["/etc/a", "/etc/b", "/etc/c", "/var/d"])
scalars = st.one_of(st.integers(0, 3), st.booleans(), st.sampled_from(["x", "y", ""]), st.none())
file_entry = st.fixed_dictionaries({"path": paths}, optional={
    "mode": st.integers(0, 511), "overwrite": st.booleans(),
    "contents": st.fixed_dictionaries({}, optional={"source": st.sampled_from(["data:,a", "data:,b"])}),
    "append": st.lists(st.fixed_dictionaries({"source": st.sampled_from(["data:,1", "data:,2"])}), max_size=2)})
unit = st.fixed_dictionaries({"name": st.sampled_from(["a.service", "b.service"])}, optional={
    "enabled": st.booleans(), "dropins": st.lists(st.fixed_dictionaries(
        {"name": st.sampled_from(["10.conf", "20.conf"])}, optional={"contents": st.sampled_from(["p", "q"])}),
        max_size=3)})
user = st.fixed_dictionaries({"name": st.sampled_from(["core", "admin"])}, optional={
    "sshAuthorizedKeys": st.lists(st.sampled_from(["k1", "k2", "k3"]), max_size=3),
    "groups": st.lists(scalars, max_size=3)})
config = st.fixed_dictionaries({}, optional={
    "ignition": st.fixed_dictionaries({"version": st.sampled_from(["3.2.0", "3.4.0"])}),
    "storage": st.fixed_dictionaries({}, optional={"files": st.lists(file_entry, max_size=4),
                                                   "directories": st.lists(st.fixed_dictionaries({"path": paths}),
                                                                           max_size=2)}),
    "systemd": st.fixed_dictionaries({}, optional={"units": st.lists(unit, max_size=3)}),
    "passwd": st.fixed_dictionaries({}, optional={"users": st.lists(user, max_size=2)}),
    "extra": st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.sampled_from("ab"), scalars))})


@settings(max_examples=300, deadline=None)
@given(st.lists(config, max_size=6))
def test_linear_merge_equals_the_reference(configs):
    before = json.dumps(configs, sort_keys=True)
    got = merge_machine_configs([{"spec": {"config": c}} for c in configs])["config"]
    want = reference(configs)
    render.default_overwrite(want)
    assert got == want
    assert json.dumps(configs, sort_keys=True) == before  # inputs untouched


def test_result_does_not_alias_the_inputs():
    mc = {"spec": {"config": {"storage": {"files": [{"path": "/a", "contents": {"source": "data:,x"}}]}}}}
    out = merge_machine_configs([mc])
    out["config"]["storage"]["files"][0]["contents"]["source"] = "changed"
    assert mc["spec"]["config"]["storage"]["files"][0]["contents"]["source"] == "data:,x"
