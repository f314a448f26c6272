"""Health after an update, end to end against a real node-config-server (issue 56): a MachineConfig
whose required health check fails is applied by the node targeted first, which reverts itself (the
files go, the config it ran before is current again), reports Degraded naming the check and "reverted
to A", does not apply the target again on its next pass; the server counts it failing on the target
and the rollout halts, so the pool's other node is never targeted. The pool's health-timeout
annotation reaches the node. Once the admin takes the config back, the node is Done on A again."""

import json
import os
import shutil
import subprocess
import sys

import yaml

from agent.resource.fetch import IGNITION_ACCEPT
from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

TOKEN = "health-token"
CHECK = "/etc/node-agent/health/required.d/50-swappiness"
SYSCTL = "/etc/sysctl.d/90-swappiness.conf"
SCRIPT = ("#!/bin/sh\n"
          "conf=\"$NODE_AGENT_ROOT/etc/sysctl.d/90-swappiness.conf\"\n"
          "grep -qx 'vm.swappiness = 10' \"$conf\" && exit 0\n"
          "echo \"vm.swappiness must be 10, the config says: $(cat \"$conf\")\"\n"
          "exit 1\n")
HEALTH_MC = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
             "metadata": {"name": "60-swappiness", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
             "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                 {"path": CHECK, "mode": 493, "contents": {"source": "data:," + SCRIPT.replace("%", "%25")
                                                           .replace("\n", "%0A").replace(" ", "%20")
                                                           .replace("#", "%23").replace('"', "%22")}},
                 {"path": SYSCTL, "mode": 420, "contents": {"source": "data:,vm.swappiness%20%3D%2060%0A"}}]}}}}


def run(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True, cwd=paths.REPO,
                          timeout=180)


def done_node(tmp_path, srv, name):
    """A worker node first booted, rebooted and Done on the pool's config: its root."""
    root = make_node_root(str(tmp_path / name), srv.base_url, "worker", ca_pem=srv.tls.ca_pem(), token=TOKEN,
                          node_name=name)
    assert run("firstboot", "--root", root).returncode == 0
    reboot(root)
    assert run("update", "--once", "--root", root).returncode == 0
    return root


def prepare(state):
    """Two workers, one at a time (maxUnavailable 1), a 2-minute health limit; shipping a check
    under /etc/node-agent/health needs no reboot (a policy entry, as docs/health.md says)."""
    shutil.copytree(os.path.join(paths.REPO, "examples", "state"), state)
    not_layered(state)
    pool_path = os.path.join(state, "machineconfigpools", "worker.yaml")
    pool = yaml.safe_load(open(pool_path))
    pool["spec"]["maxUnavailable"] = 1
    pool["metadata"]["annotations"] = {"node-config-server.openshift.io/health-timeout": "2m"}
    with open(pool_path, "w") as f:
        yaml.safe_dump(pool, f)
    mc_path = os.path.join(state, "machineconfiguration.yaml")
    mc = yaml.safe_load(open(mc_path))
    mc["spec"]["nodeDisruptionPolicy"]["files"].append({"path": "/etc/node-agent/health", "actions": [{"type": "None"}]})
    with open(mc_path, "w") as f:
        yaml.safe_dump(mc, f)


def test_a_config_whose_required_check_fails_is_reverted_by_the_node_and_the_rollout_halts(tmp_path):
    state = str(tmp_path / "state")
    prepare(state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        api = srv.session()
        roots = {}
        for name in ("w0", "w1"):
            roots[name] = done_node(tmp_path, srv, name)
        a = api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]

        with open(os.path.join(state, "machineconfigs", "60-swappiness.yaml"), "w") as f:
            yaml.safe_dump(HEALTH_MC, f)
        srv.wait_state_read()  # whichever worker answers the node, it serves B
        b = wait_for(lambda: (lambda t: t != a and t)(
            api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]),
            "the config with the failing check is the pool's target", 30)
        [first] = wait_for(lambda: api.get(srv.url("/api/v1/pools/worker")).json()["status"]["rollout"]["updating"],
                           "a node is targeted", 30)
        other = "w1" if first == "w0" else "w0"
        root = roots[first]

        failed = run("update", "--once", "--root", root)
        reason = (f"reverted to {a} after a failed health check of {b}: required check 50-swappiness: exit code 1: "
                  "vm.swappiness must be 10, the config says: vm.swappiness = 60")
        assert failed.returncode == 75, failed.stderr
        assert reason in failed.stderr and "health checks (time limit 120 s)" in failed.stderr, failed.stderr
        for path in (CHECK, SYSCTL):  # the config it ran before, back: B's files are gone
            assert not os.path.exists(os.path.join(root, path.lstrip("/"))), path
        report = api.get(srv.url(f"/api/v1/nodes/{first}")).json()["report"]
        assert (report["state"], report["currentConfig"], report["desiredConfig"], report["reason"]) == (
            "Degraded", a, b, reason)

        again = run("update", "--once", "--root", root)  # not applied again on its own
        assert again.returncode == 0, again.stderr
        assert f"{b} was reverted after a failed health check: not applied again" in again.stderr
        assert not os.path.exists(os.path.join(root, SYSCTL.lstrip("/")))
        # It keeps the ETag B is served with: its next fetch asks If-None-Match it and is answered 304
        # (held until the target changes, in the loop), not B's whole config at every pass.
        with open(os.path.join(root, "var/lib/node-agent/reverted.json")) as f:
            kept = json.load(f)["etag"]
        with open(os.path.join(root, "var/lib/node-agent/node-credential")) as f:
            credential = json.load(f)["credential"]
        as_node = {"Authorization": f"Bearer {credential}", "X-Node-Name": first, "Accept": IGNITION_ACCEPT,
                   "If-None-Match": kept}
        assert srv.session(token=False).get(srv.url("/config/worker"), headers=as_node).status_code == 304
        third = run("update", "--once", "--root", root)  # answered 304: still B, nothing applied nor reported
        assert third.returncode == 0 and "not applied again" not in third.stderr, third.stderr
        assert api.get(srv.url(f"/api/v1/nodes/{first}")).json()["report"] == report

        pool = wait_for(lambda: (lambda p: p if "halted" in p["status"]["rollout"] else None)(
            api.get(srv.url("/api/v1/pools/worker")).json()), "the rollout halts", 30)
        assert pool["status"]["rollout"]["halted"].startswith(f"rollout halted: 1 node(s) failed on the target ({first})")
        assert run("update", "--once", "--root", roots[other]).returncode == 0
        assert not os.path.exists(os.path.join(roots[other], SYSCTL.lstrip("/")))  # never targeted
        assert api.get(srv.url(f"/api/v1/nodes/{other}")).json()["report"]["currentConfig"] == a


def test_a_reverted_node_served_its_config_again_once_the_admin_takes_the_config_back_reports_done(tmp_path):
    """The VM scenario's step 5 with the real server's validation of every report: after the
    revert the admin deletes the MachineConfig, the pool's target is A again (the same name), and
    the node's next pass reports Done on A; no report is refused or left pending."""
    state = str(tmp_path / "state")
    prepare(state)
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        api = srv.session()
        root = done_node(tmp_path, srv, "w0")

        def target():
            return api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]

        def report():
            return api.get(srv.url("/api/v1/nodes/w0")).json()["report"]

        a = target()
        mc = os.path.join(state, "machineconfigs", "60-swappiness.yaml")
        with open(mc, "w") as f:
            yaml.safe_dump(HEALTH_MC, f)
        srv.wait_state_read()
        b = wait_for(lambda: (lambda t: t != a and t)(target()), "the config with the failing check is the target", 30)
        assert run("update", "--once", "--root", root).returncode == 75
        assert (report()["state"], report()["desiredConfig"]) == ("Degraded", b)
        os.unlink(mc)  # the admin takes it back
        srv.wait_state_read()  # else the node's fetch may reach a worker that still serves B
        assert target() == a
        again = run("update", "--once", "--root", root)
        assert again.returncode == 0, again.stderr
        assert f"served {a}, the config this node runs: reporting Done on it" in again.stderr, again.stderr
        assert {k: report().get(k) for k in ("state", "currentConfig", "desiredConfig", "reason")} == {
            "state": "Done", "currentConfig": a, "desiredConfig": a, "reason": None}
        assert not os.path.exists(os.path.join(root, "var/lib/node-agent/pending-report.json"))


WANTED = "/etc/node-agent/health/wanted.d/90-disk"
WANTED_MC = {"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
             "metadata": {"name": "60-disk-check", "labels": {"machineconfiguration.openshift.io/role": "worker"}},
             "spec": {"config": {"ignition": {"version": "3.4.0"}, "storage": {"files": [
                 {"path": WANTED, "mode": 493,
                  "contents": {"source": "data:,%23!%2Fbin%2Fsh%0Aecho%20%22disk%2091%25%20full%22%0Aexit%201%0A"}}]}}}}


def test_a_failed_wanted_check_is_a_warning_on_the_done_report_and_in_describe_node(tmp_path):
    state = str(tmp_path / "state")
    prepare(state)
    (tmp_path / "token").write_text(TOKEN + "\n")
    with ServerProcess(state, tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        api = srv.session()
        root = done_node(tmp_path, srv, "w0")
        a = api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
        with open(os.path.join(state, "machineconfigs", "60-disk-check.yaml"), "w") as f:
            yaml.safe_dump(WANTED_MC, f)
        srv.wait_state_read()
        b = wait_for(lambda: (lambda t: t != a and t)(
            api.get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]),
            "the config with the wanted check is the pool's target", 30)
        done = run("update", "--once", "--root", root)
        assert done.returncode == 0, done.stderr
        warning = "wanted health check(s) failed: wanted check 90-disk: exit code 1: disk 91% full"
        report = api.get(srv.url("/api/v1/nodes/w0")).json()["report"]
        assert (report["state"], report["currentConfig"], report["reason"]) == ("Done", b, warning)
        described = subprocess.run([sys.executable, "-m", "agent.server.cli", "describe", "node", "w0", "--server",
                                    srv.base_url, "--ca", srv.tls.ca_cert, "--token-file", str(tmp_path / "token")],
                                   capture_output=True, text=True, cwd=paths.REPO, timeout=60).stdout
        assert f"State:               Done ({warning})" in described, described
