"""The RPMs: built once per session by packaging/build-rpm.sh, inspected, installed into a scratch root."""

import os
import re
import shutil
import subprocess
import sys
from typing import Dict, List

import pytest

import agent
from tests.helpers import paths

REPO = paths.REPO
BUILD_RPM_BOUND = paths.BUILD_RPM_BOUND
VERSION = agent.__version__

pytestmark = pytest.mark.skipif(
    shutil.which("rpmbuild") is None or shutil.which("rpm") is None,
    reason="rpmbuild is not installed (Debian: apt-get install rpm; Fedora/RHEL: dnf install rpm-build)",
)


def run(*argv: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{argv} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def rpms(tmp_path_factory) -> Dict[str, str]:
    out = tmp_path_factory.mktemp("rpm")
    # with the checkout on the caller's PYTHONPATH, as tools/suite_cpu.py's command has it
    proc = run("bash", os.path.join(REPO, "packaging/build-rpm.sh"), str(out), cwd=REPO,
               env=dict(os.environ, PYTHONPATH=REPO), timeout=BUILD_RPM_BOUND)
    paths = proc.stdout.split()
    assert all(p.endswith(".rpm") and os.path.isfile(p) for p in paths), proc.stdout
    by_name = {}
    for path in paths:
        name = run("rpm", "-qp", "--qf", "%{NAME}", path).stdout
        by_name[name] = path
    return by_name


@pytest.fixture(scope="module")
def installed(rpms, tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("rpmroot"))
    # A private database inside the scratch root; no scriptlets (no systemctl against the host).
    run("rpm", "--root", root, "--dbpath", "/var/lib/rpm", "--initdb")
    run("rpm", "--root", root, "--dbpath", "/var/lib/rpm", "--nodeps", "--noscripts", "-i",
        rpms["node-agent"], rpms["node-agent-server"])
    return root


def files(path: str) -> List[str]:
    return run("rpm", "-qlp", path).stdout.split()


def site(paths: List[str]) -> str:
    (init,) = [p for p in paths if p.endswith("/agent/__init__.py")]
    return init[: -len("/agent/__init__.py")]


def test_two_noarch_packages_at_the_project_version(rpms):
    assert set(rpms) == {"node-agent", "node-agent-server"}
    for path in rpms.values():
        info = run("rpm", "-qp", "--qf", "%{VERSION} %{ARCH}", path).stdout
        assert info == f"{VERSION} noarch"
        assert os.path.basename(path).startswith(("node-agent-0", "node-agent-server-0"))


def test_a_checkout_on_the_callers_pythonpath_does_not_empty_the_package(rpms):
    """The fixture builds with PYTHONPATH set to the checkout: the build's pip once took node-agent
    for installed already and put nothing into the buildroot."""
    assert any(p.endswith("/agent/cli.py") for p in files(rpms["node-agent"]))


def test_agent_package_file_list(rpms):
    paths = files(rpms["node-agent"])
    sitelib = site(paths)
    for expected in [
        "/usr/bin/node-agent",
        "/usr/lib/systemd/system/node-agent-firstboot.service",
        "/usr/lib/systemd/system/node-agent.service",
        "/usr/lib/systemd/system/kubelet.service.d/10-node-agent-firstboot.conf",
        "/usr/lib/systemd/system-preset/80-node-agent.preset",
        "/etc/node-agent/agent.yaml",
        "/var/lib/node-agent",
        "/usr/share/doc/node-agent/operations.md",
        "/usr/share/doc/node-agent/troubleshooting.md",  # firstboot's exit codes and what to do, on the node
        "/usr/share/doc/node-agent/install.md",
        "/usr/share/doc/node-agent/commands.md",
        f"{sitelib}/agent/cli.py",
        f"{sitelib}/agent/host/log.py",
        f"{sitelib}/agent/node/status.py",
        f"{sitelib}/node_agent-{VERSION}.dist-info/entry_points.txt",
    ]:
        assert expected in paths, f"{expected} not in the node-agent RPM"
    assert not [p for p in paths if "/agent/server" in p], "the server belongs to node-agent-server"
    assert "/usr/bin/node-config-server" not in paths
    assert not [p for p in paths if "direct_url.json" in p or "/tests/" in p]


def test_server_package_file_list(rpms):
    paths = files(rpms["node-agent-server"])
    sitelib = site(files(rpms["node-agent"]))
    assert "/usr/bin/node-config-server" in paths
    assert "/usr/lib/systemd/system/node-config-server.service" in paths
    assert f"{sitelib}/agent/server/__init__.py" in paths
    assert all(p.startswith(f"{sitelib}/agent/server") or p in (
        "/usr/bin/node-config-server", "/usr/lib/systemd/system/node-config-server.service") for p in paths)


def test_dependencies(rpms):
    requires = run("rpm", "-qp", "--requires", rpms["node-agent"]).stdout.splitlines()
    for dep in ("python3-requests", "python3-pydbus", "python3-pyyaml", "python3-tenacity"):
        assert dep in requires
    server = run("rpm", "-qp", "--requires", rpms["node-agent-server"]).stdout.splitlines()
    assert "python3-gunicorn" in server
    assert any(re.fullmatch(rf"node-agent = {re.escape(VERSION)}-\S+", r) for r in server), server


def test_agent_yaml_is_config_noreplace(rpms):
    out = run("rpm", "-qp", "--qf", "[%{FILENAMES} %{FILEFLAGS:fflags}\n]", rpms["node-agent"]).stdout
    flags = dict(line.rsplit(" ", 1) for line in out.splitlines() if line.startswith("/etc/"))
    assert "c" in flags["/etc/node-agent/agent.yaml"] and "n" in flags["/etc/node-agent/agent.yaml"]


def test_scriptlets_enable_agent_units_and_never_restart_first_boot(rpms):
    scripts = run("rpm", "-qp", "--scripts", rpms["node-agent"]).stdout
    post = scripts.split("postinstall scriptlet")[1].split("scriptlet")[0]
    assert "preset" in post and "node-agent-firstboot.service" in post and "node-agent.service" in post
    restarts = [line for line in scripts.splitlines() if "restart" in line and "systemctl" in line]
    assert restarts and not [line for line in restarts if "node-agent-firstboot" in line]
    server = run("rpm", "-qp", "--scripts", rpms["node-agent-server"]).stdout
    assert "node-config-server.service" in server


def test_installed_tree(installed, rpms):
    names = run("rpm", "--root", installed, "--dbpath", "/var/lib/rpm", "-qa", "--qf", "%{NAME}\n").stdout.split()
    assert sorted(names) == ["node-agent", "node-agent-server"]
    # every file as packaged (digests, sizes, modes), except ownership the scratch root cannot hold
    verify = subprocess.run(["rpm", "--root", installed, "--dbpath", "/var/lib/rpm", "-V", "--nodeps",
                             "--nouser", "--nogroup", "node-agent", "node-agent-server"],
                            capture_output=True, text=True, timeout=60)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with open(os.path.join(installed, "etc/node-agent/agent.yaml")) as f, \
            open(os.path.join(REPO, "examples/agent.yaml")) as src:
        assert f.read() == src.read()
    assert os.path.isdir(os.path.join(installed, "var/lib/node-agent"))
    with open(os.path.join(installed, "usr/lib/systemd/system/node-agent-firstboot.service")) as f, \
            open(os.path.join(REPO, "systemd/node-agent-firstboot.service")) as src:
        assert f.read() == src.read()


def test_installed_commands_run(installed, rpms, tmp_path):
    sitelib = site(files(rpms["node-agent"]))
    env = {**os.environ, "PYTHONPATH": os.path.join(installed, sitelib.lstrip("/")),
           "PYTHONDONTWRITEBYTECODE": "1"}
    # The console script as installed, run by the interpreter the package was built for.
    script = os.path.join(installed, "usr/bin/node-agent")
    with open(script) as f:
        shebang = f.readline()
    assert shebang.startswith("#!/usr/bin/python3")
    python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
    proc = run(python, script, "--version", env=env, cwd=str(tmp_path))
    assert proc.stdout.strip() == f"node-agent {VERSION}"
    proc = subprocess.run([python, script, "status", "--root", installed], capture_output=True, text=True,
                          env=env, cwd=str(tmp_path), timeout=60)
    assert proc.returncode == 1 and "node-agent has not run" in proc.stdout, proc.stdout + proc.stderr


def test_source0_holds_tracked_files_only(tmp_path):
    """Source0 is what git tracks, as the working tree has it: a node database a `serve --state
    examples/state` of an older version left there, or any other untracked file, is not packed
    (issue 31). rpmbuild is stubbed: only the tarball is looked at."""
    import tarfile

    clone = tmp_path / "clone"
    run("git", "clone", "-q", "--no-hardlinks", REPO, str(clone))
    shutil.copy2(os.path.join(REPO, "packaging", "build-rpm.sh"), clone / "packaging" / "build-rpm.sh")
    (clone / "examples" / "state" / "nodes.db").write_bytes(b"SQLite format 3\0")
    (clone / "examples" / "state" / "nodes.db-wal").write_bytes(b"")
    (clone / "scratch-notes.txt").write_text("not tracked\n")
    with open(clone / "README.md", "a") as f:
        f.write("\nedited, not committed\n")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("rpmbuild", "rpm"):
        (stubs / name).write_text("#!/bin/sh\nexit 0\n")
        (stubs / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{stubs}{os.pathsep}{os.environ['PATH']}")
    run("bash", str(clone / "packaging" / "build-rpm.sh"), str(tmp_path / "out"), cwd=str(clone), env=env,
        timeout=BUILD_RPM_BOUND)
    name = f"node-agent-{VERSION}"
    with tarfile.open(tmp_path / "out" / "SOURCES" / f"{name}.tar.gz") as tar:
        packed = {m.name[len(name) + 1:] for m in tar.getmembers() if m.isfile()}
        readme = tar.extractfile(f"{name}/README.md").read().decode()
    tracked = set(run("git", "ls-files", cwd=str(clone)).stdout.splitlines())
    assert packed == tracked
    assert "edited, not committed" in readme  # the working tree's content, not HEAD's
