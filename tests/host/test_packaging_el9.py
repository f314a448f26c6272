"""The RHEL 9 RPMs (build-rpm.sh's el9 target): RHEL 9's layout and dependencies, and the payload,
unpacked with rpm2cpio/cpio as a node would hold it, imports and runs under CPython 3.9."""

import glob
import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List, Optional

import pytest

import agent
from tests.helpers import paths

REPO = paths.REPO
BUILD_RPM_BOUND = paths.BUILD_RPM_BOUND
VERSION = agent.__version__
SITELIB = "/usr/lib/python3.9/site-packages"
# Packages the el9 RPM may require: RHEL 9 BaseOS/AppStream (python3, requests, PyYAML,
# gobject-base) and EPEL 9 (tenacity 8.2.3-1.el9, gunicorn); python3-tomli (RHEL 9 CRB / EPEL 9)
# because 3.9 has no tomllib. Not python3-pydbus: no RHEL 9 or EPEL 9 repository has it
# (packages.fedoraproject.org/pkgs/python-pydbus lists Fedora releases only), so the RPM bundles it.
RHEL9_NAMES = {"python3", "python3-requests", "python3-pyyaml", "python3-gobject-base", "python3-tenacity",
               "python3-tomli", "python3-gunicorn", "/bin/sh", "/usr/bin/python3",
               # EPEL 9: python3-prometheus_client 0.21.0-1.el9, python3-rich 13.1.0-1.el9
               # (packages.fedoraproject.org/pkgs/python-prometheus_client, .../python-rich)
               "python3-prometheus_client", "python3-rich",
               # RHEL 9 BaseOS: tzdata (zoneinfo's time zone database, for the server's maintenance windows)
               "tzdata"}

pytestmark = pytest.mark.skipif(
    shutil.which("rpmbuild") is None or shutil.which("rpm2cpio") is None or shutil.which("cpio") is None,
    reason="rpmbuild/rpm2cpio/cpio are not installed (Debian: apt-get install rpm cpio)",
)


def run(*argv: str, timeout: float = 180, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def python39() -> Optional[str]:
    """A CPython 3.9 with the agent's libraries: this one under `make py39`, else .venv39's."""
    if sys.version_info[:2] == (3, 9):
        return sys.executable
    candidate = os.path.join(REPO, ".venv39", "bin", "python")
    return candidate if os.path.exists(candidate) else None


@pytest.fixture(scope="module")
def el9(tmp_path_factory) -> Dict[str, str]:
    out = tmp_path_factory.mktemp("rpm-el9")
    proc = run("bash", os.path.join(REPO, "packaging/build-rpm.sh"), str(out), "el9", cwd=REPO, timeout=BUILD_RPM_BOUND)
    return {run("rpm", "-qp", "--qf", "%{NAME}", p).stdout: p for p in proc.stdout.split()}


@pytest.fixture(scope="module")
def payload(el9, tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("payload"))
    for path in el9.values():
        rpm2cpio = subprocess.Popen(["rpm2cpio", path], stdout=subprocess.PIPE)
        run("cpio", "-idm", "--quiet", stdin=rpm2cpio.stdout, cwd=root)
        assert rpm2cpio.wait(timeout=60) == 0
    return root


def files(path: str) -> List[str]:
    return run("rpm", "-qlp", path).stdout.split()


def test_el9_packages_are_named_for_rhel9(el9):
    assert set(el9) == {"node-agent", "node-agent-server"}
    for path in el9.values():
        assert run("rpm", "-qp", "--qf", "%{VERSION}-%{RELEASE} %{ARCH}", path).stdout == f"{VERSION}-1.el9 noarch"


def test_el9_layout_is_rhel9s_python39_sitelib(el9):
    paths = files(el9["node-agent"]) + files(el9["node-agent-server"])
    assert f"{SITELIB}/agent/__init__.py" in paths and f"{SITELIB}/agent/server/http/app.py" in paths
    assert f"{SITELIB}/node_agent-{VERSION}.dist-info/METADATA" in paths
    python_files = [p for p in paths if p.endswith((".py", ".pyc"))]
    assert python_files and all(p.startswith(SITELIB + "/") for p in python_files)
    assert not [p for p in paths if "dist-packages" in p or "direct_url.json" in p]
    # The MCD's first boot is held off where node-agent is installed (tests/unit/test_mcd_handoff.py).
    assert "/usr/lib/systemd/system/machine-config-daemon-firstboot.service.d/10-node-agent.conf" in paths
    # Bytecode for 3.9 only (or none when no 3.9 built it): never another Python's.
    assert not [p for p in paths if p.endswith(".pyc") and ".cpython-39." not in p]


def test_el9_requires_exist_in_rhel9_or_epel9(el9):
    requires = run("rpm", "-qp", "--requires", el9["node-agent"]).stdout.splitlines()
    assert {"python3-tomli", "python3-requests", "python3-pyyaml", "python3-gobject-base",
            "python3-tenacity"} <= set(requires)
    assert "python3-pydbus" not in requires
    assert "python(abi) = 3.9" in requires
    provides = run("rpm", "-qp", "--provides", el9["node-agent"]).stdout.splitlines()
    assert "bundled(python3-pydbus) = 0.6.0" in provides
    server = run("rpm", "-qp", "--requires", el9["node-agent-server"]).stdout.splitlines()
    for dep in requires + server:
        name = dep.split()[0]
        if name.startswith(("rpmlib(", "python(abi)", "config(node-agent)", "node-agent")):
            continue
        assert name in RHEL9_NAMES, f"{dep}: not a RHEL 9 / EPEL 9 package name"


def test_el9_payload_imports_and_runs_with_python39(payload, tmp_path):
    py = python39()
    if py is None:
        pytest.skip("no CPython 3.9 with the agent's libraries (make py39 creates .venv39)")
    site = os.path.join(payload, SITELIB.lstrip("/"))
    env = {**os.environ, "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"}
    modules = sorted(m[len(site) + 1:-3].replace("/", ".") for m in glob.glob(f"{site}/agent/**/*.py", recursive=True)
                     if not m.endswith("__main__.py"))
    code = ("import importlib, sys, agent\n"
            f"assert sys.version_info[:2] == (3, 9), sys.version\n"
            f"assert agent.__file__.startswith({site!r}), agent.__file__\n"
            f"for m in {modules!r}: importlib.import_module(m.replace('.__init__', ''))\n"
            "print(len(sys.modules))")
    run(py, "-c", code, env=env, cwd=str(tmp_path))
    # The console script as packaged: RHEL 9's /usr/bin/python3 is 3.9; run it with ours.
    script = os.path.join(payload, "usr/bin/node-agent")
    with open(script) as f:
        assert f.readline().strip() == "#!/usr/bin/python3"
    assert run(py, script, "--version", env=env, cwd=str(tmp_path)).stdout.strip() == f"node-agent {VERSION}"
    for name, code in (("worker.ign", 0), ("invalid-paths.ign", 1)):
        proc = subprocess.run([py, script, "validate", os.path.join(REPO, "examples/ignition", name)],
                              capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=60)
        assert proc.returncode == code, proc.stdout + proc.stderr
        assert not re.search(r"Traceback|internal error", proc.stderr), proc.stderr


def test_el9_bundles_pydbus_and_uses_it_when_none_is_installed(el9, payload, tmp_path):
    paths = files(el9["node-agent"])
    assert f"{SITELIB}/agent/_vendor/pydbus/__init__.py" in paths
    assert any(p.endswith("/LICENSE.pydbus") for p in paths)
    py = python39()
    if py is None:
        pytest.skip("no CPython 3.9 with the agent's libraries (make py39 creates .venv39)")
    site = os.path.join(payload, SITELIB.lstrip("/"))
    # As on RHEL 9: no pydbus among the installed packages (a finder hides the venv's copy).
    code = ("import sys\n"
            "class Hide:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'pydbus': raise ImportError('no pydbus on RHEL 9')\n"
            "sys.meta_path.insert(0, Hide())\n"
            "from agent.host.dbusmanager import import_pydbus\n"
            "m = import_pydbus()\n"
            "print(m.__name__, m.SystemBus.__module__)")
    env = {**os.environ, "PYTHONPATH": site, "PYTHONDONTWRITEBYTECODE": "1"}
    out = run(py, "-c", code, env=env, cwd=str(tmp_path)).stdout.split()
    assert out == ["agent._vendor.pydbus", "agent._vendor.pydbus.bus"]
