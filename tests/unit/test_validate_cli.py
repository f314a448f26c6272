"""``node-agent validate``: exit codes and "path first" output, in-process and as a real process."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main
from tests.helpers import paths

ROOT = Path(paths.REPO)
EXAMPLES = ROOT / "examples" / "ignition"
NODE_AGENT = ROOT / ".venv" / "bin" / "node-agent"


@pytest.mark.parametrize("name", ["worker.ign", "machineconfig-worker.yaml"])
def test_valid_examples_exit_0(name, capsys):
    assert main(["validate", str(EXAMPLES / name)]) == 0
    assert capsys.readouterr().out == ""


def test_the_example_pointer_s_placeholder_ca_is_refused_with_a_pointer_to_the_docs(capsys):
    # It used to validate and then fail first boot decoding the CA.
    assert main(["validate", str(EXAMPLES / "pointer.ign")]) == 1
    out = capsys.readouterr().out
    assert out.startswith("$.ignition.security.tls.certificateAuthorities.0.source: error:")
    assert "placeholder" in out and "docs/install.md, section 'Configure'" in out and "[ca-not-pem]" in out


@pytest.mark.parametrize("name,first_path", [
    ("invalid-paths.ign", "$.storage.files.0.path"),
    ("invalid-units.ign", "$.systemd.units.0.name"),
    ("invalid-version.ign", "$.ignition.version"),
    ("invalid-machineconfig.yaml", "$.spec.config.storage.files.0.mode"),
])
def test_invalid_examples_exit_1_every_line_path_first(name, first_path, capsys):
    assert main(["validate", str(EXAMPLES / name)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines and lines[0].startswith(first_path + ": error: ")
    assert all(line.startswith("$") for line in lines)


def test_warnings_are_printed_but_exit_0(tmp_path, capsys):
    f = tmp_path / "w.ign"
    f.write_text('{"ignition": {"version": "3.4.0"}, "bogus": 1}')
    assert main(["validate", str(f)]) == 0
    assert capsys.readouterr().out.startswith("$.bogus: warning: unused key bogus")


def test_syntax_error_names_file_line_column(capsys):
    path = str(EXAMPLES / "invalid-syntax.ign")
    assert main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert f"{path}: invalid JSON at line 3, column 3" in out


def test_a_missing_file_exits_66_not_invalid(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.ign")]) == 66
    out, err = capsys.readouterr()
    assert out == "" and f"{tmp_path / 'nope.ign'}: no such file" in err


def test_json_output(capsys):
    assert main(["validate", "--json", str(EXAMPLES / "invalid-paths.ign")]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["valid"] is False
    assert out["problems"][0]["path"] == "$.storage.files.0.path"
    assert out["problems"][0]["rule"] == "path-absolute"
    assert main(["validate", "--json", str(EXAMPLES / "worker.ign")]) == 0
    assert json.loads(capsys.readouterr().out) == {"valid": True, "problems": []}


@pytest.mark.skipif(not NODE_AGENT.exists(), reason="console script not installed")
def test_real_process_stdin_and_file():
    bad = subprocess.run([str(NODE_AGENT), "validate", "-"], input=b'{"ignition":{"version":"3.4.0"},'
                         b'"storage":{"files":[{"path":"/ok"},{"path":"/a","mode":420},{"path":"/x"},'
                         b'{"path":"etc/x"}]}}', capture_output=True, timeout=60)
    assert bad.returncode == 1
    assert bad.stdout.decode().splitlines()[0].startswith(
        "$.storage.files.3.path: error: path not absolute (got 'etc/x') [path-absolute]")
    assert b"Traceback" not in bad.stderr
    good = subprocess.run([str(NODE_AGENT), "validate", str(EXAMPLES / "worker.ign")], capture_output=True,
                          timeout=60)
    assert good.returncode == 0, good.stdout + good.stderr


def test_module_entry_point_matches():
    r = subprocess.run([sys.executable, "-m", "agent", "validate", str(EXAMPLES / "invalid-units.ign")],
                       capture_output=True, cwd=str(ROOT), timeout=60)
    assert r.returncode == 1
    assert r.stdout.decode().startswith("$.systemd.units.0.name: error:")
