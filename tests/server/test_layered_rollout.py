"""A layered pool's rollout reaches every node, one at a time (issue 52), on the directory backend:
the example state's infra pool (maxUnavailable 1, a MachineOSConfig and a succeeded MachineOSBuild
of its rendered config), three scratch nodes that boot the base image. Each node's
``update --once`` stages the OS change (an offline root records the rebase), the node boots it
(``boot_staged``: a new boot id and the staged image), and its next pass reports Done with the
image the server targeted. Upstream the Node keeps its desiredImage annotation once set, so a
node Done on the build is never a candidate again (layered_node_state.go
``CheckNodeCandidacyForUpdate``); here the node reports it."""

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import paths
from tests.helpers.certs import make_tls
from tests.helpers.noderoot import boot_staged, make_node_root, reboot
from tests.helpers.server_proc import ServerProcess
from tests.helpers.wait import wait_for

REPO = paths.REPO
TOKEN = "layered-token"
BASE = "quay.io/openshift-release-dev/rhel-coreos-9:9.6.20250121-0"
NODES = ["infra-0", "infra-1", "infra-2"]
IMG_B = "registry.example.com/infra/os-image@sha256:" + "b" * 64
PICKED_UP = 30  # the server reads the state directory every second, after --settle-seconds


def agent(*args):
    return subprocess.run([sys.executable, "-m", "agent.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=120)


def pool(srv):
    r = srv.session().get(srv.url("/api/v1/pools/infra"))
    assert r.status_code == 200, r.text
    return r.json()


def report(srv, name):
    r = srv.session().get(srv.url(f"/api/v1/nodes/{name}"))
    assert r.status_code == 200, r.text
    return r.json()["report"]


def layered_image(state, config):
    for name in os.listdir(os.path.join(state, "machineosbuilds")):
        text = open(os.path.join(state, "machineosbuilds", name)).read()
        if f"name: {config}" in text:
            return text.split("digestedImagePushSpec: ")[1].split()[0]
    raise AssertionError(f"no MachineOSBuild for {config}")


def converge(srv, roots, config, image, rounds=10):
    """Rounds of every node's ``update --once`` (a node that staged an OS change boots it) until
    every node is Done on ``config`` with ``image``; the pool's count of updating nodes seen after
    each pass, and the order in which the nodes got there."""
    updating, order = [], []
    for _ in range(rounds):
        for name in NODES:
            r = agent("update", "--once", "--root", roots[name])
            assert r.returncode == 0, (name, r.stderr)
            if os.path.exists(os.path.join(roots[name], "var/lib/node-agent/reboot-pending.json")):
                boot_staged(roots[name])
            updating.append(pool(srv)["status"]["rollout"]["counts"].get("Updating", 0))
            rep = report(srv, name)
            if name not in order and rep.get("state") == "Done" and rep.get("currentConfig") == config \
                    and rep.get("currentImage") == image:
                order.append(name)
        if len(order) == len(NODES):
            return updating, order
    pytest.fail(f"not every node Done on {config} with {image} after {rounds} rounds: {order} "
                f"({[report(srv, n) for n in NODES]})")


@pytest.fixture
def cluster(tmp_path):
    state = tmp_path / "state"
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    with ServerProcess(str(state), tls=make_tls(str(tmp_path / "tls")), token=TOKEN) as srv:
        roots = {}
        for name in NODES:
            roots[name] = make_node_root(str(tmp_path / name), srv.base_url, "infra", ca_pem=srv.tls.ca_pem(),
                                         token=TOKEN, node_name=name, booted_image=BASE)
            r = agent("firstboot", "--root", roots[name])
            assert r.returncode == 0, r.stderr
            reboot(roots[name])
            assert agent("update", "--once", "--root", roots[name]).returncode == 0
        yield srv, state, roots


def test_a_layered_pool_updates_every_node_one_at_a_time_to_each_new_build_and_is_updated(cluster):
    srv, state, roots = cluster
    a = pool(srv)["spec"]["configuration"]["name"]
    img_a = layered_image(str(state), a)
    # New nodes boot the base image (no node proves the build yet, MCO-1940); then the server
    # rolls the build's image out to them, one at a time (maxUnavailable 1).
    assert {report(srv, n).get("currentImage") for n in NODES} == {BASE}
    updating, order = converge(srv, roots, a, img_a)
    assert max(updating) <= 1 and order == NODES, (updating, order)

    # A new rendering B and its build: nobody moves until the build succeeded, then one at a time.
    mc = state / "machineconfigs" / "60-infra-b.yaml"
    mc.write_text("apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n"
                  "  name: 60-infra-b\n  labels: {machineconfiguration.openshift.io/role: infra}\nspec:\n"
                  "  config:\n    ignition: {version: 3.4.0}\n    storage:\n      files:\n"
                  "      - {path: /etc/infra-b, mode: 420, contents: {source: 'data:,b'}}\n")
    srv.wait_state_read()
    b = wait_for(lambda: (lambda t: t != a and t)(pool(srv)["spec"]["configuration"]["name"]), "B is the target",
                 PICKED_UP)
    for name in NODES:
        assert agent("update", "--once", "--root", roots[name]).returncode == 0
    waiting = pool(srv)["status"]["rollout"]
    assert "image of " + b in waiting.get("waitReason", "") and waiting["counts"] == {"Waiting": 3}, waiting
    build = (state / "machineosbuilds" / "infra-build-1.yaml").read_text()
    (state / "machineosbuilds" / "infra-build-2.yaml").write_text(
        build.replace(a, b).replace(img_a, IMG_B).replace("name: infra-" + a.split("-")[-1], "name: infra-b"))
    mosc = state / "machineosconfigs" / "infra.yaml"
    mosc.write_text(mosc.read_text().replace(img_a, IMG_B))
    srv.wait_state_read()
    wait_for(lambda: "image of" not in pool(srv)["status"]["rollout"].get("waitReason", "image of"),
             "the build of B is seen", PICKED_UP)
    updating, order = converge(srv, roots, b, IMG_B)
    assert max(updating) <= 1 and order == NODES, (updating, order)
    for name in NODES:
        assert open(os.path.join(roots[name], "etc/infra-b")).read() == "b"
        assert report(srv, name)["desiredImage"] == IMG_B
    status = pool(srv)["status"]
    conds = {c["type"]: c["status"] for c in status["conditions"]}
    assert (status["updatedMachineCount"], status["machineCount"], conds["Updated"]) == (3, 3, "True")
    assert status["rollout"]["counts"] == {"Done": 3}

    # A node that joins now first-boots into B's proven image, says so, and is no candidate.
    late = make_node_root(os.path.join(os.path.dirname(roots["infra-0"]), "infra-3"), srv.base_url, "infra",
                          ca_pem=srv.tls.ca_pem(), token=TOKEN, node_name="infra-3", booted_image=BASE)
    assert agent("firstboot", "--root", late).returncode == 0
    boot_staged(late)
    assert agent("update", "--once", "--root", late).returncode == 0
    rep = report(srv, "infra-3")
    assert (rep["currentConfig"], rep["currentImage"], rep["desiredImage"]) == (b, IMG_B, IMG_B), rep
    rollout = pool(srv)["status"]["rollout"]
    assert rollout["counts"] == {"Done": 4} and "updating" not in rollout, rollout
