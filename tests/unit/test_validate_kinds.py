"""``node-agent validate`` checks every document node-agent reads by its kind, with the rules its
consumer applies (``agent.core.documents``): one valid and one invalid example per kind, the exit
code and the JSON path of the finding, and the same verdict as the consumer of the same file."""

import argparse
import json
import os
import shutil
from pathlib import Path

import pytest

from agent.cli import main
from agent.commands import validate
from agent.core.documents import KINDS, check_document, detect_kind
from agent.core.settings import parse_settings_file
from agent.core.skewrules import load_rules_text, parse_rules
from agent.errors import ConfigError
from agent.ignition.parse import parse_document
from agent.server.store.stateformat import KINDS as STATE_KINDS
from agent.server.store.stateformat import load_state
from tests.helpers import paths

ROOT = Path(paths.REPO)
EX = ROOT / "examples"
CORPUS = Path(os.environ.get("NODE_AGENT_MCO_CORPUS") or os.path.join(
    os.environ.get("NODE_AGENT_SHARED_DIR") or os.path.join(ROOT.parent, "shared"), "mco-corpus"))
SERVER = "https://config-server.example.com:22623"
MCO = "machineconfiguration.openshift.io/v1"


def _pointer(source: str) -> str:
    return json.dumps({"ignition": {"version": "3.4.0", "config": {"merge": [{"source": source}]}}})


# kind -> (valid example, (invalid example, JSON path of its first error)); a Path is a file, a str its text
TABLE = {
    "Ignition": (EX / "ignition" / "worker.ign", (EX / "ignition" / "invalid-paths.ign", "$.storage.files.0.path")),
    "Pointer": (_pointer(f"{SERVER}/config/worker"),
                (_pointer(f"{SERVER}/config/Not_A_Pool"), "$.ignition.config.merge.0.source")),
    "MachineConfig": (EX / "ignition" / "machineconfig-worker.yaml",
                      (EX / "ignition" / "invalid-machineconfig.yaml", "$.spec.config.storage.files.0.mode")),
    "MachineConfigPool": (EX / "state" / "machineconfigpools" / "worker.yaml",
                          (f"apiVersion: {MCO}\nkind: MachineConfigPool\nmetadata: {{name: worker}}\n"
                           "spec:\n  maxUnavailable: \"3\"\n", "$.spec.maxUnavailable")),
    "MachineConfiguration": (EX / "policy" / "machineconfiguration.yaml",
                             (EX / "policy" / "invalid-policy.yaml", "$.spec.nodeDisruptionPolicy.files.0.path")),
    "MachineOSConfig": (EX / "state" / "machineosconfigs" / "infra.yaml",
                        (f"apiVersion: {MCO}\nkind: MachineOSConfig\nmetadata: {{name: infra}}\n"
                         "spec:\n  machineConfigPool: {name: worker}\n", "$.metadata.name")),
    "MachineOSBuild": (EX / "state" / "machineosbuilds" / "infra-build-1.yaml",
                       (f"apiVersion: {MCO}alpha1\nkind: MachineOSBuild\nmetadata: {{name: b}}\nspec: {{}}\n",
                        "$.apiVersion")),
    "AgentSettings": (EX / "agent.yaml", ("fetch:\n  attemptTimeout: -1\n", "$.fetch.attemptTimeout")),
    "SkewRules": (EX / "skew" / "rules-warn-ocp4.13.yaml", ('{"mode": "Sometimes"}', "$.mode")),
}
EXTRA_INVALID = [  # more consumer rules, each reached through its kind
    ("MachineConfiguration", "apiVersion: operator.openshift.io/v1\nkind: MachineConfiguration\nmetadata: "
     "{name: cluster}\nspec:\n  bootImageSkewEnforcement: {mode: Automatic}\n",
     "$.spec.bootImageSkewEnforcement.mode"),
    ("MachineConfiguration", "kind: MachineConfiguration\nspec:\n  bootImageSkewEnforcement:\n    mode: Manual\n"
     "    manual: {mode: RHCOSVersion, rhcosVersion: '9.2'}\n",
     "$.spec.bootImageSkewEnforcement.manual.rhcosVersion"),
    ("Pointer", (EX / "ignition" / "pointer.ign"), "$.ignition.security.tls.certificateAuthorities.0.source"),
    ("MachineConfigPool", f"apiVersion: {MCO}\nkind: MachineConfigPool\nmetadata: {{name: Worker}}\n",
     "$.metadata.name"),
]


def _write(tmp_path: Path, example, name: str) -> Path:
    if isinstance(example, Path):
        return example
    path = tmp_path / name
    path.write_text(example)
    return path


def _validate_json(path: Path, capsys, *extra: str):
    rc = main(["validate", "--json", *extra, str(path)])
    return rc, json.loads(capsys.readouterr().out)


def test_the_table_covers_every_kind():
    assert set(TABLE) == set(KINDS)


@pytest.mark.parametrize("kind", sorted(TABLE))
def test_a_valid_example_of_each_kind_exits_0_as_that_kind(kind, tmp_path, capsys):
    path = _write(tmp_path, TABLE[kind][0], "valid")
    rc, out = _validate_json(path, capsys)
    assert (rc, out["valid"]) == (0, True), out
    assert not [p for p in out["problems"] if p["severity"] == "error"]
    assert check_document(path.read_bytes(), str(path))[1] == kind


@pytest.mark.parametrize("kind,example,first", [(k, v[1][0], v[1][1]) for k, v in sorted(TABLE.items())]
                         + EXTRA_INVALID)
def test_an_invalid_example_of_each_kind_exits_1_naming_the_path(kind, example, first, tmp_path, capsys):
    path = _write(tmp_path, example, "invalid")
    rc, out = _validate_json(path, capsys)
    assert (rc, out["valid"]) == (1, False)
    errors = [p for p in out["problems"] if p["severity"] == "error"]
    assert errors and errors[0]["path"] == first, errors
    assert check_document(path.read_bytes(), str(path))[1] == kind
    assert "line" in errors[0]  # where in the file, for every kind
    main(["validate", str(path)])  # and the text form: path first on every line
    assert all(line.startswith("$") for line in capsys.readouterr().out.splitlines())


def test_the_issue_31_case_a_machineconfiguration_is_checked_as_one_not_as_a_machineconfig(capsys):
    policy = EX / "policy" / "invalid-policy.yaml"
    assert main(["plan", "--policy", str(policy), "--from", str(EX / "policy" / "from.yaml"),
                 "--to", str(EX / "policy" / "to.yaml")]) == 65
    plan_err = capsys.readouterr().err
    assert "'node-agent validate FILE'" in plan_err
    rc, out = _validate_json(policy, capsys)
    assert rc == 1 and all(p["path"] != "$.kind" for p in out["problems"])
    plan_paths = [line.split(":")[0] for line in plan_err.splitlines() if line.startswith("$")]
    assert [p["path"] for p in out["problems"]] == plan_paths  # the same findings as plan's


def test_an_unknown_kind_names_the_known_ones(tmp_path, capsys):
    path = tmp_path / "kc.yaml"
    path.write_text(f"apiVersion: {MCO}\nkind: KubeletConfig\nmetadata: {{name: k}}\nspec: {{}}\n")
    rc, out = _validate_json(path, capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$.kind"
    assert all(k in out["problems"][0]["message"] for k in KINDS)
    path.write_text("color: blue\n")
    rc, out = _validate_json(path, capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$" and "--kind" in out["problems"][0]["message"]


def _run(path: Path, kind, capsys):
    rc = validate.run(argparse.Namespace(file=str(path), json=True, kind=kind))
    return rc, json.loads(capsys.readouterr().out)


def test_kind_option_overrides_the_shape_and_an_unknown_one_is_refused(tmp_path, capsys):
    path = tmp_path / "a.yaml"
    path.write_text("mode: None\n")  # skew rules by their shape ...
    assert _run(path, None, capsys)[0] == 0
    rc, out = _run(path, "agent.yaml", capsys)  # ... as an agent.yaml: a key the agent ignores
    assert rc == 0 and [(p["path"], p["severity"]) for p in out["problems"]] == [("$.mode", "warning")]
    rc, out = _run(path, "MachineConfigPool", capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$.metadata.name"
    rc, out = _run(path, "Gadget", capsys)
    assert rc == 1 and "known kinds are" in out["problems"][0]["message"]
    rc, out = _run(EX / "ignition" / "worker.ign", "pointer", capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$.ignition.config"


def test_settings_warn_about_unknown_keys_as_the_agent_logs_them(tmp_path, capsys):
    path = tmp_path / "agent.yaml"
    path.write_text("stateDir: /var/lib/node-agent\nfetch:\n  attemptTimeout: 5\n  retries: 3\n")
    assert check_document(path.read_bytes(), str(path), "AgentSettings")[2][0].path == "$.fetch.retries"
    assert _run(path, "agent.yaml", capsys)[0] == 0


def test_a_pointer_without_a_config_server_url_warns(tmp_path):
    path = tmp_path / "p.ign"
    path.write_text(_pointer("data:,%7B%22ignition%22%3A%7B%22version%22%3A%223.4.0%22%7D%7D"))
    valid, kind, problems = check_document(path.read_bytes(), str(path))
    assert (valid, kind) == (True, "Pointer")
    assert [p.rule for p in problems] == ["pointer-pool"] and problems[0].severity == "warning"


# --- the same verdicts as each kind's consumer ---------------------------------------------------

def _server_verdict(tmp_path: Path, doc_path: Path, kind: str):
    """(accepted, error paths) of the server's state loader for the one document."""
    state = tmp_path / "state"
    if state.exists():
        shutil.rmtree(state)
    state.mkdir()
    if kind == "MachineConfiguration":
        shutil.copy(doc_path, state / "machineconfiguration.yaml")
    else:
        sub = {v: k for k, v in STATE_KINDS.items()}[kind]
        (state / sub).mkdir()
        shutil.copy(doc_path, state / sub / "doc.yaml")
    loaded = load_state(str(state))
    return not loaded.problems, sorted(p.path for p in loaded.problems)


def _documents(tmp_path: Path):
    for kind, (valid, (invalid, _path)) in TABLE.items():
        yield kind, _write(tmp_path, valid, f"{kind}-valid")
        yield kind, _write(tmp_path, invalid, f"{kind}-invalid")
    for i, (kind, example, _path) in enumerate(EXTRA_INVALID):
        yield kind, _write(tmp_path, example, f"extra-{i}")


def test_server_kinds_get_the_verdict_and_paths_of_the_server_s_load_state(tmp_path):
    server_kinds = ("MachineConfigPool", "MachineConfiguration", "MachineOSConfig", "MachineOSBuild")
    docs = [(k, p) for k, p in _documents(tmp_path) if k in server_kinds]
    if CORPUS.is_dir():
        index = json.loads((CORPUS / "index.json").read_text())
        docs += [(e["kind"], CORPUS / e["file"]) for e in index if e["kind"] in server_kinds]
    assert len(docs) >= 10
    for kind, path in docs:
        valid, _kind, problems = check_document(path.read_bytes(), str(path))
        errors = sorted(p.path for p in problems if p.is_error)
        assert (valid, errors) == _server_verdict(tmp_path, path, kind), path


def test_node_kinds_get_the_verdict_of_their_consumer(tmp_path):
    checked = []
    for kind, path in _documents(tmp_path):
        data = path.read_bytes()
        valid = check_document(data, str(path))[0]
        if kind == "AgentSettings":
            consumer = _accepts(parse_settings_file, data, str(path))
        elif kind == "SkewRules":
            consumer = _accepts(lambda d, s: parse_rules(load_rules_text(d.decode(), s)), data, str(path))
        else:
            continue
        assert valid == consumer, path
        checked.append(kind)
    assert {"AgentSettings", "SkewRules"} <= set(checked), checked  # not a loop that skipped them all


def _accepts(call, *args) -> bool:
    try:
        call(*args)
    except ConfigError:
        return False
    return True


def test_every_example_file_is_recognised(capsys):
    for path in sorted(EX.rglob("*")):
        if path.suffix not in (".yaml", ".json", ".ign") or path.name.startswith("invalid-syntax"):
            continue
        doc = parse_document(path.read_bytes(), str(path))
        if path.parent.name == "skew" and path.name.startswith("aleph"):
            continue  # an aleph version file is read by node-agent skew --aleph, not a config
        assert detect_kind(doc) in KINDS, path


def test_a_list_of_objects_is_checked_item_by_item_as_the_server_reads_it(tmp_path, capsys):
    path = tmp_path / "pools.yaml"
    path.write_text(f"apiVersion: v1\nkind: List\nitems:\n- apiVersion: {MCO}\n  kind: MachineConfigPool\n"
                    f"  metadata: {{name: infra}}\n- apiVersion: {MCO}\n  kind: MachineConfigPool\n"
                    f"  metadata: {{name: Bad}}\n")
    rc, out = _validate_json(path, capsys)
    assert rc == 1 and [p["path"] for p in out["problems"]] == ["$.items.1.metadata.name"]
    assert out["problems"][0]["line"] == 9
    assert _server_verdict(tmp_path, path, "MachineConfigPool") == (False, ["$.metadata.name"])


def test_a_json_object_of_no_known_shape_is_checked_as_ignition_as_before(tmp_path, capsys):
    path = tmp_path / "x.json"
    path.write_text('{"storage": {}}')
    rc, out = _validate_json(path, capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$.ignition.version"


def test_kind_option_ignition_or_machineconfig_for_the_other_is_refused(capsys):
    rc, out = _run(EX / "ignition" / "worker.ign", "MachineConfig", capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$.kind"
    rc, out = _run(EX / "ignition" / "machineconfig-worker.yaml", "ignition", capsys)
    assert rc == 1 and out["problems"][0]["path"] == "$"
    assert _run(EX / "ignition" / "machineconfig-worker.yaml", "mc", capsys)[0] == 0
