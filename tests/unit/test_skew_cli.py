"""``node-agent skew`` command: exit codes, JSON shape, human output, rules errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from tests.helpers import paths

REPO = Path(paths.REPO)
EXAMPLES = REPO / "examples" / "skew"
BOOTED_KEYS = {"raw", "scheme", "rhel", "rhelMajor", "rhelMinor", "ocp", "buildDate"}


def node_agent_bin() -> str:
    candidate = Path(sys.executable).parent / "node-agent"
    return str(candidate if candidate.exists() else REPO / ".venv" / "bin" / "node-agent")


def write(tmp_path, name, content):
    p = tmp_path / name
    p.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(p)


def run_main(capsys, *argv):
    rc = main(["skew", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


# aleph example, rules example, decision, exit code, booted scheme, booted rhel, booted ocp
CASES = [
    ("aleph-legacy-4.8.json", "rules-enforce-rhel9.2.json", "refuse", 1, "rhcos-legacy", "8.4", "4.8"),
    ("aleph-legacy-4.15.json", "rules-enforce-rhel9.2.json", "ok", 0, "rhcos-legacy", "9.2", "4.15"),
    ("aleph-legacy-4.8.json", "rules-warn-ocp4.13.yaml", "warn", 0, "rhcos-legacy", "8.4", "4.8"),
    ("aleph-rhel-9.6.json", "rules-rhel10-allow-upgrade.yaml", "ok", 0, "rhcos", "9.6", None),
    ("aleph-legacy-4.15.json", "rules-rhel10-allow-upgrade.yaml", "refuse", 1, "rhcos-legacy", "9.2", "4.15"),
    ("aleph-fcos-39.json", "rules-enforce-rhel9.2.json", "warn", 0, "fcos", None, None),
    ("aleph-legacy-4.8.json", "rules-none.json", "ok", 0, "rhcos-legacy", "8.4", "4.8"),
]


@pytest.mark.parametrize("aleph,rules,decision,rc,scheme,rhel,ocp", CASES,
                         ids=[f"{a[6:-5]}+{r[6:].rsplit('.', 1)[0]}" for a, r, *_ in CASES])
def test_json_via_main(capsys, aleph, rules, decision, rc, scheme, rhel, ocp):
    code, out, err = run_main(capsys, "--aleph", str(EXAMPLES / aleph), "--rules", str(EXAMPLES / rules),
                              "--json")
    assert code == rc, err
    doc = json.loads(out)
    assert doc["decision"] == decision
    assert isinstance(doc["reason"], str) and len(doc["reason"]) > 20
    booted = doc["booted"]
    assert BOOTED_KEYS <= set(booted)
    assert (booted["scheme"], booted["rhel"], booted["ocp"]) == (scheme, rhel, ocp)
    if rhel:
        assert booted["rhelMajor"] == int(rhel.split(".")[0]) and booted["rhelMinor"] == int(rhel.split(".")[1])


@pytest.mark.parametrize("aleph,rules,decision,rc", [c[:4] for c in CASES[:3]],
                         ids=["refuse", "ok", "warn"])
def test_human_output_via_main(capsys, aleph, rules, decision, rc):
    code, out, _ = run_main(capsys, "--aleph", str(EXAMPLES / aleph), "--rules", str(EXAMPLES / rules))
    assert code == rc
    assert out.startswith(f"{decision}: ") and out.count("\n") == 1


def test_subprocess_refuse_json():
    proc = subprocess.run([node_agent_bin(), "skew", "--aleph", str(EXAMPLES / "aleph-legacy-4.8.json"),
                           "--rules", str(EXAMPLES / "rules-enforce-rhel9.2.json"), "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["decision"] == "refuse" and doc["code"] == "BootImageMajorMismatch"
    assert doc["booted"]["raw"] == "48.84.202109241901-0"
    assert doc["booted"]["buildDate"] == "2021-09-24"
    assert doc["required"] == {"rhcosVersion": "9.2"} and doc["target"]["rhelMajor"] == 9
    assert proc.stderr == ""


def test_subprocess_ok_human():
    proc = subprocess.run([node_agent_bin(), "skew", "--aleph", str(EXAMPLES / "aleph-rhel-9.6.json"),
                           "--rules", str(EXAMPLES / "rules-enforce-rhel9.2.json")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0
    assert proc.stdout.startswith("ok: ") and "9.6.20250121-0" in proc.stdout


def test_subprocess_invalid_rules_exit_65(tmp_path):
    rules = write(tmp_path, "bad.yaml", "mode: Sometimes\nminimum:\n  rhcosVersion: nine\n")
    proc = subprocess.run([node_agent_bin(), "skew", "--aleph", str(EXAMPLES / "aleph-rhel-9.6.json"),
                           "--rules", rules, "--json"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 65
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert "Traceback" not in proc.stderr
    assert any(line.startswith("$.mode:") for line in lines)
    assert any(line.startswith("$.minimum.rhcosVersion:") and "'nine'" in line for line in lines)
    assert rules in proc.stderr


@pytest.mark.parametrize("aleph_content", [None, "", "{not json", "[]", '{"ref": "x"}', '{"version": "garbage"}'],
                         ids=["missing", "empty", "corrupt", "array", "no-version", "bad-version"])
def test_missing_or_corrupt_aleph_is_warn_exit_0(capsys, tmp_path, aleph_content):
    aleph = str(tmp_path / "aleph.json") if aleph_content is None else write(tmp_path, "aleph.json", aleph_content)
    rules = write(tmp_path, "rules.json", {"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"},
                                           "target": {"rhelMajor": 9}})
    code, out, _ = run_main(capsys, "--aleph", aleph, "--rules", rules, "--json")
    assert code == 0
    doc = json.loads(out)
    assert doc["decision"] == "warn" and doc["code"] == "BootImageVersionUnknown"
    assert doc["booted"]["scheme"] == "unknown"
    assert doc["booted"]["rhel"] is None and doc["booted"]["ocp"] is None
    assert doc["booted"]["error"]


def test_aleph_directory_is_unknown(capsys, tmp_path):
    rules = write(tmp_path, "rules.json", {"mode": "Enforce", "target": {"rhelMajor": 9}})
    code, out, _ = run_main(capsys, "--aleph", str(tmp_path), "--rules", rules, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["decision"] == "warn" and doc["code"] == "BootImageVersionUnknown"
    assert doc["booted"]["scheme"] == "unknown" and doc["booted"]["error"]


def test_a_missing_rules_file_exits_66(capsys, tmp_path):
    code, out, err = run_main(capsys, "--aleph", str(EXAMPLES / "aleph-rhel-9.6.json"), "--rules",
                              str(tmp_path / "rules"))
    assert (code, out) == (66, "") and f"--rules {tmp_path / 'rules'}: no such file" in err


@pytest.mark.parametrize("content,fragment", [
    ("", "empty"),
    ("mode: [x\n", "neither JSON nor YAML"),
    (b"\xff\xfe\x00", "not UTF-8"),
    ('{"mode": "Enforce", "target": {"rhelMajor": "nine"}}', "$.target.rhelMajor:"),
], ids=["empty", "unparsable", "binary", "invalid-field"])
def test_bad_rules_file_exit_65(capsys, tmp_path, content, fragment):
    rules = tmp_path / "rules"
    if isinstance(content, bytes):
        rules.write_bytes(content)
    else:
        rules.write_text(content)
    code, out, err = run_main(capsys, "--aleph", str(EXAMPLES / "aleph-rhel-9.6.json"), "--rules", str(rules))
    assert code == 65
    assert out == ""
    assert fragment in err and err.startswith("node-agent skew: ")


def test_refuse_exit_1_for_too_old_in_enforce(capsys, tmp_path):
    aleph = write(tmp_path, "aleph.json", {"build": "412.86.202301311551-0"})
    rules = write(tmp_path, "rules.json", {"mode": "Enforce", "minimum": {"ocpVersion": "4.13.0"}})
    code, out, _ = run_main(capsys, "--aleph", aleph, "--rules", rules, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["decision"] == "refuse" and doc["code"] == "BootImageTooOld"
    assert "4.13.0" in doc["reason"]


def test_aleph_symlink_is_followed(capsys, tmp_path):
    target = write(tmp_path, ".aleph-version.json", {"version": "10.0.20250601-0"})
    link = tmp_path / ".coreos-aleph-version.json"
    os.symlink(os.path.basename(target), link)
    rules = write(tmp_path, "rules.json", {"mode": "Enforce", "target": {"rhelMajor": 9}})
    code, out, _ = run_main(capsys, "--aleph", str(link), "--rules", rules, "--json")
    doc = json.loads(out)
    assert code == 1 and doc["booted"]["rhel"] == "10.0"
