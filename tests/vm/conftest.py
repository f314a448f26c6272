"""The VM scenario runs once per session (minutes of QEMU); test_vm_boot.py (the guest's side)
and test_vm_node.py (the cluster's side) assert on the same run."""

import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile

import pytest

from tests.helpers.etcd_cluster import ETCD
from tests.helpers.kube_cluster import KUBECTL, find_kube_bin
from tests.helpers.paths import REPO
from tests.vm import scenario, summary
from tests.vm.journal import Journal

MISSING = [tool for tool in ("qemu-system-x86_64", "debootstrap", "debugfs", "mkfs.ext4", "journalctl",
                             "rpmbuild", "containerd", "ctr", "ip") if shutil.which(tool) is None]
SUMMARY = os.path.join(REPO, "build", "vm-test", "summary.json")
# What the guest left (its journal, the pods' logs, node-agent's state) after a run with a failed
# test: kept for the cause, the last such run only (a run's readback is tens of MB).
FAILED_READBACK = os.path.join(REPO, "build", "vm-test", "failed-readback")
# The failed scenario's digest (tests/vm/failure.py), which `make test` prints after its phases'
# times: there the suites' output may follow the VM boot's.
FAILURE_DIGEST = os.path.join(REPO, "build", "vm-test", "failure.txt")
# A run with a failed test, its records beside that readback: a mended test is asserted again on
# it (NODE_AGENT_VM_RESULT=build/vm-test/failed-result.json make vm-test), not on a new run.
FAILED_RESULT = os.path.join(REPO, "build", "vm-test", "failed-result.json")


def keep_readback(readback: str) -> str:
    shutil.rmtree(FAILED_READBACK, ignore_errors=True)
    os.makedirs(os.path.dirname(FAILED_READBACK), exist_ok=True)
    shutil.move(readback, FAILED_READBACK)
    return FAILED_READBACK


def keep_failed_run(result: scenario.Result) -> str:
    """The readback kept (keep_readback) and the run's records beside it, naming it."""
    kept = dataclasses.replace(result, readback=keep_readback(result.readback),
                               workdir=os.path.dirname(FAILED_RESULT))
    with open(FAILED_RESULT, "w") as f:
        json.dump(dataclasses.asdict(kept), f, indent=1)
    return os.path.dirname(FAILED_RESULT)


@pytest.fixture(scope="session")
def run(request):
    kept = os.environ.get("NODE_AGENT_VM_RESULT")
    if kept:  # assertions only, on a run kept by `python -m tests.vm.scenario DIR`
        result = scenario.load(kept)
        summary.write(result, SUMMARY)
        yield result
        return
    if os.environ.get("NODE_AGENT_VM_TEST") != "1":
        pytest.skip("the VM test (minutes of QEMU) runs under make test and make vm-test, which set "
                    "NODE_AGENT_VM_TEST=1; a bare pytest skips it")
    if MISSING:
        pytest.skip(f"the VM test needs {', '.join(MISSING)} (make sysdeps installs them as root)")
    if not find_kube_bin() or not os.access(ETCD, os.X_OK) or not os.access(KUBECTL, os.X_OK):
        pytest.skip("the VM test runs a Kubernetes control plane and the guest's kubelet: make kube-bin builds "
                    "them; make sysdeps installs etcd-server and kubectl")
    if os.geteuid() != 0:
        pytest.skip("the VM test builds its guest image with debootstrap and rpm --root: run it as root")
    # A SIGTERM (a CI timeout, pkill) unwinds like an error, so QEMU (in its own session) and the
    # control plane are stopped on the way out instead of left running.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Not under pytest's basetemp: concurrent pytest runs of the same user prune it (keeping 3),
    # which can take a 20-minute run's directory away under it.
    workdir = tempfile.mkdtemp(prefix="node-agent-vm-")
    try:
        if os.path.exists(FAILURE_DIGEST):
            os.unlink(FAILURE_DIGEST)
        try:
            result = scenario.run(workdir)
        except AssertionError as exc:  # a wait failed: what the guest's disk held then is kept too
            if os.path.isdir(os.path.join(workdir, "readback")):
                print(f"the VM scenario failed: the guest's journal and files are kept in "
                      f"{keep_readback(os.path.join(workdir, 'readback'))}")
            os.makedirs(os.path.dirname(FAILURE_DIGEST), exist_ok=True)
            with open(FAILURE_DIGEST, "w") as f:
                f.write(getattr(exc, "digest", None) or f"THE VM SCENARIO FAILED: {exc}")
                f.write("\n")
            raise
        print(f"VM scenario timings (s): {result.timings}")
        print(f"result: {scenario.save(result)}")
        print(f"summary: {summary.write(result, SUMMARY)}")
        yield result
        if request.session.testsfailed and os.path.isdir(result.readback):
            print(f"a VM test failed: the guest's journal and files, and the run's records, are kept in "
                  f"{keep_failed_run(result)} (NODE_AGENT_VM_RESULT={FAILED_RESULT} asserts them again)")
    finally:
        if os.environ.get("NODE_AGENT_VM_KEEP") != "1":  # else kept for NODE_AGENT_VM_RESULT
            shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture(scope="session")
def journal(run):
    return Journal(os.path.join(run.readback, "journal"))
