"""End to end: the real node-config-server (gunicorn, TLS, token) and real node-agent processes
on scratch roots. Custom pool join, refusal by skew, resume after SIGKILL in every stage."""

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import make_node_root, not_layered, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
EXAMPLES = os.path.join(REPO, "examples", "state")
TOKEN = "e2e-token"
INFRA_IMAGE_ARGS = dict(booted_image="", cmdline="")
STAGES = ["fetch", "validate", "skew", "pool", "plan", "apply", "act", "report"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    top = tmp_path_factory.mktemp("e2e")
    state = str(top / "state")
    shutil.copytree(EXAMPLES, state)
    tls = make_tls(str(top / "tls"))
    with ServerProcess(state, tls=tls, token=TOKEN) as srv:
        yield srv


def agent(*args, env=None):
    cmd = [sys.executable, "-m", "agent.cli", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, **(env or {})))


def node(server, tmp_path, name, pool, **kw):
    return make_node_root(str(tmp_path / name), server.base_url, pool, ca_pem=server.tls.ca_pem(), token=TOKEN,
                          node_name=name, fetch_budget=20, **kw)


def tree(root, under="etc", skip=("etc/node-agent/agent.yaml",)):
    """path -> (mode, bytes) of every regular file and link under ``root/under`` (the node's own
    settings, which name it, left out)."""
    out = {}
    base = os.path.join(root, under)
    for dirpath, _dirs, filenames in os.walk(base):
        for f in filenames:
            p = os.path.join(dirpath, f)
            rel = os.path.relpath(p, root)
            if rel in skip:
                continue
            if os.path.islink(p):
                out[rel] = ("link", os.readlink(p))
            else:
                with open(p, "rb") as fh:
                    out[rel] = (oct(os.stat(p).st_mode & 0o7777), fh.read())
    return out


def server_node(server, name):
    r = server.session().get(server.url(f"/api/v1/nodes/{name}"))
    assert r.status_code == 200, r.text
    return r.json()


def test_custom_pool_join_labels_annotations_and_registry_agree(server, tmp_path):
    root = node(server, tmp_path, "infra-0", "infra")
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr
    env = open(os.path.join(root, "etc/kubernetes/kubelet-env")).read()
    assert "KUBELET_LOG_LEVEL=2" in env  # what was there is kept
    assert "CUSTOM_KUBELET_LABELS=node-role.kubernetes.io/infra=" in env
    ann = json.load(open(os.path.join(root, "etc/machine-config-daemon/node-annotations.json")))
    pivot = ann["machineconfiguration.openshift.io/firstPivotConfig"]
    assert pivot.startswith("rendered-infra-")
    seen = server_node(server, "infra-0")
    assert seen["pool"] == "infra"
    assert seen["report"]["firstPivotConfig"] == pivot
    assert seen["report"]["state"] in ("Done", "Working")
    pool = server.session().get(server.url("/api/v1/pools/infra")).json()
    assert "infra-0" in pool["status"]["nodes"]
    assert os.path.exists(os.path.join(root, "var/lib/node-agent/firstboot.done"))
    st = agent("status", "--root", root, "--json")
    assert st.returncode == 0
    record = json.loads(st.stdout)
    assert record["pool"] == "infra" and [s["name"] for s in record["stages"]] == STAGES
    # a second run is a no-op
    again = agent("firstboot", "--root", root)
    assert again.returncode == 0 and "already done" in again.stdout


def test_too_old_boot_image_is_refused_and_nothing_is_applied(server, tmp_path):
    root = node(server, tmp_path, "worker-old", "worker", aleph_version="48.84.202109241901-0")
    before = tree(root)
    r = agent("firstboot", "--root", root)
    assert r.returncode == 78, r.stderr
    issue = os.listdir(os.path.join(root, "etc/issue.d"))
    assert len(issue) == 1
    message = open(os.path.join(root, "etc/issue.d", issue[0])).read()
    assert "48.84.202109241901-0" in message and "None" in message
    after = tree(root)
    del after[os.path.join("etc/issue.d", issue[0])]
    assert after == before  # no config file written, kubelet labels untouched
    assert not os.path.exists(os.path.join(root, "var/lib/node-agent/firstboot.done"))
    seen = server_node(server, "worker-old")
    assert seen["report"]["state"] == "Degraded"
    assert seen["report"]["skew"] == "refuse"
    assert "BootImage" in seen["report"]["reason"]
    st = agent("status", "--root", root)
    assert st.returncode == 1


PENDING_OS = "var/lib/node-agent/pending-os.json"


@pytest.fixture(scope="module")
def reference(server, tmp_path_factory):
    """What one first boot that nobody killed leaves: the tree under etc/, and pending-os.json."""
    top = tmp_path_factory.mktemp("reference")
    root = node(server, top, "infra-ref", "infra")
    assert agent("firstboot", "--root", root).returncode == 0
    with open(os.path.join(root, PENDING_OS)) as f:
        return tree(root), json.load(f)


CRASH_POINTS = [(s, "enter") for s in STAGES] + [("apply", "exit"), ("act", "exit"), ("report", "exit")]


@pytest.mark.parametrize("stage,when", CRASH_POINTS, ids=[f"{s}-{w}" for s, w in CRASH_POINTS])
def test_sigkill_in_every_stage_resumes_to_the_same_node(server, tmp_path, reference, stage, when):
    name = f"infra-k-{stage}-{when}"
    root = node(server, tmp_path, name, "infra")
    killed = subprocess.run([sys.executable, "-m", "tests.helpers.kill_at_stage", stage, when, "--",
                             "firstboot", "--root", root], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert killed.returncode == -9
    assert not os.path.exists(os.path.join(root, "var/lib/node-agent/firstboot.done"))
    resumed = agent("firstboot", "--root", root)
    assert resumed.returncode == 0, resumed.stderr
    reference_tree, reference_pending = reference
    assert tree(root) == reference_tree
    with open(os.path.join(root, PENDING_OS)) as f:
        pending = json.load(f)
    assert pending["commands"]  # an OS update is pending (the infra pool's image and kernel arguments)
    assert pending == reference_pending  # recorded once, as an unkilled run records it: not stacked
    assert server_node(server, name)["report"]["state"] in ("Done", "Working")


def test_update_waits_for_the_drain_lease_then_applies_and_reports(tmp_path):
    state = str(tmp_path / "state")
    shutil.copytree(EXAMPLES, state)
    not_layered(state)
    tls = make_tls(str(tmp_path / "tls"))
    with ServerProcess(state, tls=tls, token=TOKEN, extra_args=["--lease-ttl", "6"]) as srv:
        api = srv.session()
        a = node(srv, tmp_path, "infra-a", "infra")
        assert agent("firstboot", "--root", a).returncode == 0
        reboot(a)  # the reboot its first boot asked for: the node is Done, then the server targets it
        old_target = api.get(srv.url("/api/v1/pools/infra")).json()["spec"]["configuration"]["name"]

        # A disruptive change: a file no policy entry covers needs a reboot, so a drain first.
        mc = os.path.join(state, "machineconfigs", "50-infra.yaml")
        text = open(mc).read().replace("      files:\n", "      files:\n      - path: /etc/infra-motd\n"
                                       "        mode: 420\n        contents:\n          source: data:,hello\n", 1)
        open(mc, "w").write(text)
        srv.wait_state_read()
        new_target = wait_for(lambda: (lambda name: name if name != old_target else None)(
            api.get(srv.url("/api/v1/pools/infra")).json()["spec"]["configuration"]["name"]),
            "the server picks up the change", 30)

        # Another infra node holds the only lease (maxUnavailable 1), renewing it until the agent
        # is seen waiting for it, and then dies: the lease expires and the agent gets its own.
        # (Held by renewal, not by a head start on the TTL: under load the agent may take longer
        # than that to reach the drain stage, and would then find the lease already expired.
        # Renewed about every second: the 6 s TTL leaves each renewal request 5 s, 3 s left 2.)
        def hold():
            held = srv.node_session("infra-b").post(srv.url("/api/v1/nodes/infra-b/drain"),
                                                    json={"pool": "infra", "config": new_target})
            assert held.status_code == 200, held.text

        hold()
        proc = subprocess.Popen([sys.executable, "-m", "agent.cli", "update", "--once", "--root", a],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
        lines, waiting = [], threading.Event()

        def read():
            for line in proc.stderr:
                lines.append(line)
                if "waiting" in line and "drain lease" in line:
                    waiting.set()

        reader = threading.Thread(target=read, daemon=True)
        reader.start()

        def agent_waits():
            if waiting.wait(1.0):
                return True
            assert proc.poll() is None, "".join(lines)
            hold()  # renew (TTL 6 s) while the agent has not asked yet
            return False

        wait_for(agent_waits, "the agent waits for the drain lease", 120, interval=0)
        proc.wait(120)
        reader.join(10)
        stderr = "".join(lines)
        assert proc.returncode == 0, stderr
        assert open(os.path.join(a, "etc/infra-motd")).read() == "hello"
        seen = server_node(srv, "infra-a")
        events = [e["action"] for e in seen["drainEvents"]]
        assert "cordon" in events and "drain" in events
        assert seen["report"]["desiredConfig"] == new_target
        st = json.loads(agent("status", "--root", a, "--json").stdout)
        assert st["command"] == "update" and st["rebootPending"] is True
        assert [s["name"] for s in st["stages"]] == ["fetch", "validate", "plan", "drain", "apply", "act", "report"]


def test_no_reboot_and_no_os_update_when_the_boot_image_already_is_the_target(server, tmp_path):
    served = server.session().get(server.url("/config/infra"),
                                  headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"})
    from agent.core.served import node_config_from_served

    target = node_config_from_served(served.json())
    root = node(server, tmp_path, "infra-at-target", "infra", booted_image=target.os_image_url,
                cmdline=" ".join(target.kernel_arguments))
    r = agent("firstboot", "--root", root)
    assert r.returncode == 0, r.stderr
    assert not os.path.exists(os.path.join(root, "var/lib/node-agent/pending-os.json"))
    status = json.loads(agent("status", "--root", root, "--json").stdout)
    assert status["rebootPending"] is False
    assert server_node(server, "infra-at-target")["report"]["state"] == "Done"


def test_a_file_the_policy_does_not_cover_still_reboots_once_at_first_boot(server, tmp_path):
    # worker's base config has files only the example policy covers; without the served policy's
    # entries (plan against the built-in defaults) they would reboot: `plan --firstboot` says so.
    served = server.session().get(server.url("/config/worker"),
                                  headers={"Accept": "application/vnd.coreos.ignition+json;version=3.4.0"})
    to = tmp_path / "worker.ign"
    to.write_bytes(served.content)
    empty = tmp_path / "empty.ign"
    empty.write_text('{"ignition": {"version": "3.4.0"}}')
    r = agent("plan", "--from", str(empty), "--to", str(to), "--firstboot", "--json")
    assert r.returncode == 0, r.stderr
    plan = json.loads(r.stdout)
    assert plan["reboot"] is True and plan["drain"] is False  # no drain at first boot
    assert [a["type"] for a in plan["actions"]] == ["Reboot"]


def test_dry_run_plans_and_changes_nothing(server, tmp_path):
    root = node(server, tmp_path, "infra-dry", "infra")
    before = {**tree(root, "etc"), **tree(root, "var")}
    r = agent("firstboot", "--root", root, "--dry-run")
    assert r.returncode == 0, r.stderr
    assert "Actions:" in r.stdout and "Changes:" in r.stdout
    assert {**tree(root, "etc"), **tree(root, "var")} == before
    assert not os.path.exists(os.path.join(root, "var/lib/node-agent"))
    assert server.session().get(server.url("/api/v1/nodes/infra-dry")).status_code == 404  # nothing reported


def test_missing_pointer_is_a_config_error(server, tmp_path):
    root = node(server, tmp_path, "no-pointer", "infra")
    os.unlink(os.path.join(root, "etc/node-agent/pointer.ign"))
    r = agent("firstboot", "--root", root)
    assert r.returncode == 65
    assert "pointer.ign does not exist" in r.stderr and "Traceback" not in r.stderr
