"""First-boot skew stage (agent.node.skewcheck) against a fake filesystem (pyfakefs)."""

import json
import logging
import os
import stat

import pytest

from agent.errors import ConfigError, HostError, SkewRefused
from agent.host.root import Root
from agent.node.skewcheck import (
    ALEPH_PATH,
    ISSUE_PATH,
    RULES_PATH,
    check_boot_image,
    clear_console_message,
    console_message,
    enforce,
    load_rules_file,
    report_fields,
    write_console_message,
)

TOP = "/node"
ENFORCE_92 = {"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"}, "target": {"rhelMajor": 9,
              "osImageURL": "quay.io/ocp/rhcos@sha256:feed"}}


@pytest.fixture
def root(fs):
    fs.create_dir(TOP + "/sysroot")
    fs.create_dir(TOP + "/etc")
    return Root(TOP)


def put_aleph(fs, doc, name=".coreos-aleph-version.json"):
    content = doc if isinstance(doc, str) else json.dumps(doc)
    fs.create_file(f"{TOP}/sysroot/{name}", contents=content)


def issue_host_path():
    return TOP + ISSUE_PATH


# ---------------------------------------------------------------------------------------------
# reading the aleph file inside the root


def test_plain_aleph_version(fs, root):
    put_aleph(fs, {"version": "9.6.20250121-0", "build": "415.92.202311241643-0"})
    out = check_boot_image(root, ENFORCE_92)
    assert out.decision == "ok" and out.booted.raw == "9.6.20250121-0"


def test_build_fallback(fs, root):
    put_aleph(fs, {"build": "415.92.202311241643-0", "ref": "", "ostree-commit": "ab", "imgid": "x.qcow2"})
    out = check_boot_image(root, ENFORCE_92)
    assert out.decision == "ok" and out.booted.version.scheme == "rhcos-legacy"


def test_absolute_symlink_resolves_inside_the_root(fs, root):
    put_aleph(fs, {"version": "48.84.202109241901-0"}, name=".aleph-version.json")
    # A decoy on the host's own /sysroot: an absolute link must not reach it.
    fs.create_file("/sysroot/.aleph-version.json", contents=json.dumps({"version": "9.6.20250121-0"}))
    fs.create_symlink(TOP + ALEPH_PATH, "/sysroot/.aleph-version.json")
    out = check_boot_image(root, ENFORCE_92)
    assert out.booted.raw == "48.84.202109241901-0"
    assert out.decision == "refuse"


def test_relative_symlink(fs, root):
    put_aleph(fs, {"version": "415.92.202311241643-0"}, name=".aleph-version.json")
    fs.create_symlink(TOP + ALEPH_PATH, ".aleph-version.json")
    out = check_boot_image(root, ENFORCE_92)
    assert out.booted.raw == "415.92.202311241643-0" and out.decision == "ok"


def test_symlink_escaping_the_root_is_unknown(fs, root):
    fs.create_file("/outside.json", contents=json.dumps({"version": "9.6.20250121-0"}))
    fs.create_symlink(TOP + ALEPH_PATH, "../../../outside.json")
    out = check_boot_image(root, ENFORCE_92)
    assert out.decision == "warn" and out.code == "BootImageVersionUnknown"
    assert out.booted.raw is None


def test_dangling_symlink_is_unknown(fs, root):
    fs.create_symlink(TOP + ALEPH_PATH, ".aleph-version.json")
    out = check_boot_image(root, ENFORCE_92)
    assert out.decision == "warn" and "does not exist" in out.booted.error


@pytest.mark.parametrize("content", [None, "", "{", "[]", '{"ref": "x"}', '{"version": "nightly"}'],
                         ids=["missing", "empty", "truncated", "array", "no-version", "garbage-version"])
def test_missing_or_corrupt_aleph_warns(fs, root, content):
    if content is not None:
        put_aleph(fs, content)
    out = check_boot_image(root, ENFORCE_92)
    assert out.decision == "warn" and out.code == "BootImageVersionUnknown"
    assert ALEPH_PATH in out.reason or ALEPH_PATH in out.booted.error
    assert not enforce(out).refused


def test_no_rules_served_warns(fs, root):
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    out = check_boot_image(root, None)
    assert out.decision == "warn" and out.code == "NoSkewRules"
    assert "No boot image skew rules" in out.reason


def test_invalid_rules_raise_config_error(fs, root):
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    with pytest.raises(ConfigError) as info:
        check_boot_image(root, {"mode": "Strict"})
    assert info.value.exit_code == 65 and RULES_PATH in str(info.value)
    assert "$.mode" in str(info.value)


# ---------------------------------------------------------------------------------------------
# console message


def test_refuse_writes_issue_then_ok_clears_it(fs, root):
    put_aleph(fs, {"version": "412.86.202301311551-0"})
    rules = {"mode": "Enforce", "minimum": {"rhcosVersion": "9.2"}}
    out = check_boot_image(root, rules)
    assert out.decision == "refuse" and out.code == "BootImageTooOld"
    path = write_console_message(root, out)
    assert path == issue_host_path()
    text = open(path).read()
    assert "412.86.202301311551-0" in text
    assert "at least RHCOS 9.2" in text
    assert "bootImageSkewEnforcement mode to None" in text
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    assert os.listdir(os.path.dirname(path)) == [os.path.basename(path)]  # no temp file left

    # the boot image was updated; a later check passes and the message goes away
    os.unlink(TOP + ALEPH_PATH)
    put_aleph(fs, {"version": "9.6.20250121-0"})
    again = check_boot_image(root, rules)
    assert again.decision == "ok"
    assert clear_console_message(root) is True
    assert not os.path.exists(path)
    assert clear_console_message(root) is False


def test_rewrite_replaces_the_message(fs, root):
    put_aleph(fs, {"version": "10.0.20250601-0"})
    out = check_boot_image(root, ENFORCE_92)
    assert out.code == "BootImageMajorMismatch"
    fs.create_file(issue_host_path(), contents="old message\n")
    write_console_message(root, out)
    text = open(issue_host_path()).read()
    assert "old message" not in text
    assert "use a RHEL 9 boot image for this pool" in text
    assert "quay.io/ocp/rhcos@sha256:feed" in text


def test_issue_dir_symlink_followed_inside_root(fs, root):
    fs.create_dir(TOP + "/usr/lib/issue.d")
    fs.create_symlink(TOP + "/etc/issue.d", "/usr/lib/issue.d")
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    path = write_console_message(root, check_boot_image(root, ENFORCE_92))
    assert path == TOP + "/usr/lib/issue.d/50-node-agent-boot-image.issue"
    assert os.path.exists(path)


def test_write_failure_is_host_error(fs, root):
    fs.create_file(TOP + "/etc/issue.d", contents="not a directory")
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    with pytest.raises(HostError, match="cannot write the console message"):
        write_console_message(root, check_boot_image(root, ENFORCE_92))


def test_console_message_escapes_backslashes(fs, root):
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    rules = {"mode": "Enforce", "target": {"rhelMajor": 9, "osImageURL": "registry.local/a\\l"}}
    out = check_boot_image(root, rules)
    assert "a\\l" in console_message(out)
    write_console_message(root, out)
    assert "a\\\\l" in open(issue_host_path()).read()


# ---------------------------------------------------------------------------------------------
# report fields and enforcement


def test_report_fields_refuse_too_old(fs, root):
    put_aleph(fs, {"version": "412.86.202301311551-0"})
    out = check_boot_image(root, {"mode": "Enforce", "minimum": {"ocpVersion": "4.13.0"}})
    fields = report_fields(out)
    assert fields["skew"] == "refuse" and fields["state"] == "Degraded"
    assert fields["bootImage"] == "412.86.202301311551-0"
    assert fields["reason"].startswith("BootImageTooOld: ")


def test_report_fields_refuse_major_mismatch(fs, root):
    put_aleph(fs, {"version": "10.0.20250601-0"})
    fields = report_fields(check_boot_image(root, ENFORCE_92))
    assert fields["reason"].startswith("BootImageMajorMismatch: ") and fields["state"] == "Degraded"


def test_report_fields_warn_and_ok_have_no_state(fs, root):
    put_aleph(fs, {"version": "412.86.202301311551-0"})
    warn = report_fields(check_boot_image(root, {"mode": "Warn", "minimum": {"rhcosVersion": "9.2"}}))
    assert warn["skew"] == "warn" and "state" not in warn
    off = check_boot_image(root, {"mode": "None"})
    ok = report_fields(off)
    assert ok == {"skew": "ok", "bootImage": "412.86.202301311551-0", "reason": f"{off.code}: {off.reason}"}
    assert ok["reason"].startswith("SkewEnforcementOff: ")


def test_report_fields_unknown_boot_image(fs, root):
    fields = report_fields(check_boot_image(root, ENFORCE_92))
    assert fields["skew"] == "warn" and fields["bootImage"] is None


def test_enforce_refuse_raises_exit_78(fs, root, caplog):
    put_aleph(fs, {"version": "48.84.202109241901-0"})
    out = check_boot_image(root, ENFORCE_92)
    with caplog.at_level(logging.INFO, logger="agent.node.skewcheck"), pytest.raises(SkewRefused) as info:
        enforce(out)
    assert info.value.exit_code == 78
    assert "BootImageMajorMismatch" in str(info.value)
    assert [r.levelno for r in caplog.records if r.name == "agent.node.skewcheck"] == [logging.ERROR]


def test_enforce_warn_logs_a_warning(fs, root, caplog):
    put_aleph(fs, {"version": "412.86.202301311551-0"})
    out = check_boot_image(root, {"mode": "Warn", "minimum": {"rhcosVersion": "9.2"}})
    with caplog.at_level(logging.INFO, logger="agent.node.skewcheck"):
        assert enforce(out) is out
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING and r.name == "agent.node.skewcheck"]
    assert len(warnings) == 1 and "older than the minimum" in warnings[0].getMessage()
    assert warnings[0].NODE_AGENT_STAGE == "skew"


def test_enforce_ok_logs_info_only(fs, root, caplog):
    put_aleph(fs, {"version": "9.6.20250121-0"})
    with caplog.at_level(logging.INFO, logger="agent.node.skewcheck"):
        enforce(check_boot_image(root, ENFORCE_92))
    assert [r.levelno for r in caplog.records if r.name == "agent.node.skewcheck"] == [logging.INFO]


# ---------------------------------------------------------------------------------------------
def test_load_rules_file(fs, root):
    assert load_rules_file(root) is None
    fs.create_file(TOP + RULES_PATH, contents=json.dumps(ENFORCE_92))
    assert load_rules_file(root) == ENFORCE_92
