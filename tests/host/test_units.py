"""The shipped systemd units, checked by systemd itself (``systemd-analyze verify``) in a scratch root.

The scratch root holds the host's own unit files (so sysinit.target, network-online.target...
resolve), a stub kubelet.service, stub executables for every ExecStart, and our units and
kubelet drop-in where the RPM installs them. Any complaint about our units fails the test, and
negative controls prove the harness would notice a broken unit or a missing dependency.
"""

import os
import re
import shutil
import subprocess
from typing import Dict, List

import pytest

from tests.helpers import paths

REPO = paths.REPO
UNITS_SRC = os.path.join(REPO, "systemd")
UNIT_DIR = "/usr/lib/systemd/system"
OURS = ("node-agent-firstboot.service", "node-agent.service", "node-config-server.service")
DROPIN = "kubelet.service.d/10-node-agent-firstboot.conf"
HOST_UNITS = next((d for d in ("/usr/lib/systemd/system", "/lib/systemd/system")
                   if os.path.exists(os.path.join(d, "sysinit.target"))), None)

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None or HOST_UNITS is None,
    reason="systemd-analyze and the host's systemd units are needed (Debian: apt-get install systemd)",
)

KUBELET_STUB = """[Unit]
Description=kubelet (test stub)
[Service]
ExecStart=/usr/bin/kubelet
[Install]
WantedBy=multi-user.target
"""


def build_root(top: str) -> str:
    unit_dir = os.path.join(top, UNIT_DIR.lstrip("/"))
    shutil.copytree(HOST_UNITS, unit_dir, symlinks=False, ignore_dangling_symlinks=True,
                    dirs_exist_ok=True)
    bindir = os.path.join(top, "usr/bin")
    os.makedirs(bindir, exist_ok=True)
    for name in ("node-agent", "node-config-server", "kubelet"):
        path = os.path.join(bindir, name)
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(path, 0o755)
    with open(os.path.join(unit_dir, "kubelet.service"), "w") as f:
        f.write(KUBELET_STUB)
    for name in OURS:
        shutil.copy(os.path.join(UNITS_SRC, name), unit_dir)
    os.makedirs(os.path.join(unit_dir, "kubelet.service.d"), exist_ok=True)
    shutil.copy(os.path.join(UNITS_SRC, DROPIN), os.path.join(unit_dir, DROPIN))
    return top


@pytest.fixture(scope="module")
def scratch_root(tmp_path_factory):
    return build_root(str(tmp_path_factory.mktemp("unit-root")))


def verify(top: str, unit: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        # Plain verify: Documentation= man: pages are looked up too (no --man=no).
        ["systemd-analyze", "verify", f"--root={top}", "--generators=no",
         "--recursive-errors=one", f"{UNIT_DIR}/{unit}"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "SYSTEMD_LOG_COLOR": "0"},
    )


def complaints_about_ours(output: str) -> List[str]:
    names = OURS + ("kubelet.service", "10-node-agent-firstboot.conf")
    return [line for line in output.splitlines() if any(n in line for n in names)]


@pytest.mark.parametrize("unit", OURS + ("kubelet.service",))
def test_unit_verifies_cleanly(scratch_root, unit):
    proc = verify(scratch_root, unit)
    output = proc.stdout + proc.stderr
    assert complaints_about_ours(output) == [], output
    assert proc.returncode == 0, output


def test_harness_catches_a_broken_unit(tmp_path):
    top = build_root(str(tmp_path))
    path = os.path.join(top, UNIT_DIR.lstrip("/"), "node-agent.service")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("RestartSec=30s", "RestartSec=30x\nRestartSecs=1"))
    proc = verify(top, "node-agent.service")
    output = proc.stdout + proc.stderr
    assert "Failed to parse sec value" in output and "Unknown key" in output
    assert complaints_about_ours(output)


def test_kubelet_dropin_is_loaded(tmp_path):
    # verify reads the drop-in as part of kubelet.service: a bad line in it is reported against it.
    top = build_root(str(tmp_path))
    path = os.path.join(top, UNIT_DIR.lstrip("/"), DROPIN)
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("AssertPathExists=/var/lib", "AssertPathExists=var/lib"))
    proc = verify(top, "kubelet.service")
    output = proc.stdout + proc.stderr
    assert "10-node-agent-firstboot.conf" in output and "AssertPathExists" in output, output


@pytest.mark.skipif(shutil.which("man") is None, reason="man (Debian: man-db) looks man: pages up")
def test_documentation_naming_a_missing_man_page_is_reported(tmp_path):
    # The negative control for the plain verify above: a man: page that does not exist fails it
    # (as man:node-agent(8) once did).
    top = build_root(str(tmp_path))
    path = os.path.join(top, UNIT_DIR.lstrip("/"), "node-agent.service")
    with open(path) as f:
        text = f.read()
    with open(path, "w") as f:
        f.write(text.replace("Documentation=", "Documentation=man:node-agent-nonexistent(8) ", 1))
    proc = verify(top, "node-agent.service")
    assert proc.returncode != 0
    assert "man node-agent-nonexistent(8)" in proc.stdout + proc.stderr


def test_documentation_points_at_files_the_rpm_ships():
    with open(os.path.join(REPO, "packaging", "node-agent.spec")) as f:
        spec = f.read()
    for name in OURS:
        docs = words(parse_unit(os.path.join(UNITS_SRC, name)), "Unit", "Documentation")
        assert docs, name
        for uri in docs:
            assert uri.startswith("file:///usr/share/doc/node-agent/"), (name, uri)
            assert "%{_docdir}/%{name}/" + uri.rsplit("/", 1)[1] in spec, (name, uri)


def test_missing_executable_is_reported(tmp_path):
    top = build_root(str(tmp_path))
    os.unlink(os.path.join(top, "usr/bin/node-agent"))
    proc = verify(top, "node-agent-firstboot.service")
    assert proc.returncode != 0
    assert "/usr/bin/node-agent is not executable" in proc.stdout + proc.stderr


# ---------------------------------------------------------------------------- what the units say

def parse_unit(path: str) -> Dict[str, Dict[str, List[str]]]:
    """section -> key -> values (systemd allows a key several times); joins continued lines."""
    out: Dict[str, Dict[str, List[str]]] = {}
    section = None
    with open(path) as f:
        text = re.sub(r"\\\n", " ", f.read())
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = out.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        section.setdefault(key.strip(), []).append(value.strip())
    return out


def one(unit, section, key):
    values = unit[section].get(key)
    assert values, f"{key}= missing in [{section}]"
    return values[-1]


def words(unit, section, key):
    return " ".join(unit[section].get(key, [])).split()


def test_firstboot_unit_contract():
    u = parse_unit(os.path.join(UNITS_SRC, "node-agent-firstboot.service"))
    assert one(u, "Service", "Type") == "oneshot"
    assert one(u, "Service", "RemainAfterExit") == "yes"
    assert one(u, "Service", "ExecStart") == "/usr/bin/node-agent firstboot"
    assert one(u, "Service", "TimeoutStartSec") == "infinity"
    assert one(u, "Service", "StandardOutput") == "journal+console"
    assert one(u, "Unit", "ConditionPathExists") == "!/var/lib/node-agent/firstboot.done"
    assert "network-online.target" in words(u, "Unit", "After")
    assert "network-online.target" in words(u, "Unit", "Wants")
    assert "kubelet.service" in words(u, "Unit", "Before")
    assert "ProtectSystem" not in u["Service"], "the agent writes anywhere in /etc and /var"
    assert "multi-user.target" in words(u, "Install", "WantedBy")


def test_day2_unit_contract():
    u = parse_unit(os.path.join(UNITS_SRC, "node-agent.service"))
    assert one(u, "Service", "ExecStart") == "/usr/bin/node-agent update"
    assert one(u, "Service", "Restart") == "on-failure"
    assert one(u, "Service", "RestartSec")
    assert "node-agent-firstboot.service" in words(u, "Unit", "After")
    assert one(u, "Unit", "ConditionPathExists") == "/var/lib/node-agent/firstboot.done"


def test_kubelet_dropin_contract():
    u = parse_unit(os.path.join(UNITS_SRC, DROPIN))
    assert words(u, "Unit", "Wants") == ["node-agent-firstboot.service"]
    assert words(u, "Unit", "After") == ["node-agent-firstboot.service"]
    assert one(u, "Unit", "AssertPathExists") == "/var/lib/node-agent/firstboot.done"
    # Requires=/BindsTo=/PartOf= would propagate a restart or stop of the first-boot unit (a
    # retry, disable --now, the RPM's %preun) to a running kubelet; the VM test saw it happen.
    for key in ("Requires", "BindsTo", "PartOf", "Requisite"):
        assert key not in u["Unit"], key


def test_firstboot_runs_before_crio():
    u = parse_unit(os.path.join(UNITS_SRC, "node-agent-firstboot.service"))
    assert "crio.service" in words(u, "Unit", "Before")


def test_server_unit_is_hardened():
    u = parse_unit(os.path.join(UNITS_SRC, "node-config-server.service"))
    exec_start = one(u, "Service", "ExecStart").split()
    assert exec_start[:6] == ["/usr/bin/node-config-server", "serve", "--state", "/var/lib/node-config-server",
                              "--data-dir", "/var/lib/node-config-server"]  # nodes.db where it always was
    s = {k: v[-1] for k, v in u["Service"].items()}
    assert s["DynamicUser"] == "yes" and s["StateDirectory"] == "node-config-server"
    assert s["ProtectSystem"] == "strict" and s["NoNewPrivileges"] == "yes"
    assert s["CapabilityBoundingSet"] == ""


def test_server_unit_exposure_is_low(scratch_root):
    proc = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", f"--root={scratch_root}", "--threshold=20",
         f"{UNIT_DIR}/node-config-server.service"],
        capture_output=True, text=True, timeout=60, env={**os.environ, "SYSTEMD_COLORS": "0"},
    )
    match = re.search(r"Overall exposure level for node-config-server.service: ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    assert float(match.group(1)) <= 2.0, proc.stdout
