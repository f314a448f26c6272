"""A name waiting for approval is marked wherever nodes are listed or described (issue 57,
item 2): three first boots before approval read ``Done True`` in ``get nodes`` beside ``MACHINES
0`` in ``get pools``, and ``describe`` listed them with no mark. Against the real server with
serve's own approval default."""

import subprocess
import sys

from tests.helpers.server_proc import REPO
from tests.server.test_approval import ADMIN, WORKER, as_admin, register, report, start

NODES = ("w0", "w1", "w2")


def ncs(*args):
    return subprocess.run([sys.executable, "-m", "agent.server.cli", *args], capture_output=True, text=True,
                          cwd=REPO, timeout=60)


def test_names_waiting_for_approval_are_marked_in_every_view_and_the_pool_counts_them(tmp_path):
    (tmp_path / "admin-token").write_text(ADMIN + "\n")
    with start(tmp_path) as srv:
        client = ("--server", srv.base_url, "--token-file", str(tmp_path / "admin-token"))
        target = as_admin(srv).get(srv.url("/api/v1/pools/worker")).json()["spec"]["configuration"]["name"]
        for node in NODES:  # each first boot's last report, before anyone approved the name
            register(srv, node)
            report(srv, node, state="Done", currentConfig=target, desiredConfig=target, firstPivotConfig=target,
                   labels=WORKER)

        nodes = ncs("get", "nodes", "-o", "wide", *client)
        assert nodes.returncode == 0, nodes.stderr
        header, *rows = nodes.stdout.splitlines()
        cols = header.split()
        for row in rows:
            cells = dict(zip(cols, row.split(None, len(cols) - 1)))
            assert (cells["STATE"], cells["UPDATED"], cells["ROLLOUT"]) == ("Done", "False", "AwaitingApproval"), row
            assert cells["REASON"].startswith("waits for approval: its report counts for nothing"), row

        pools = ncs("get", "pools", *client).stdout
        worker = [line for line in pools.splitlines() if line.startswith("worker ")][0]
        assert worker.split()[5] == "0", pools  # MACHINES: they count in nothing...
        assert "\nworker: 3 node(s) wait for approval, counted in no column (w0, w1, w2): node-config-server " \
               "approve node --pending lists them" in pools, pools  # ...and the pool says so under its table

        pool = ncs("describe", "pool", "worker", *client).stdout
        assert "; 3 more wait for approval, not counted" in pool and "\nWaiting approval:    3 node(s)" in pool, pool
        listed = pool.split("\nNodes:\n", 1)[1].splitlines()
        assert all("PENDING approval, not counted" in line for line in listed[1:4]), pool
        node = ncs("describe", "node", "w0", *client).stdout
        assert "\nApproval:            Pending: waits for approval: " in node, node

        assert as_admin(srv).post(srv.url("/api/v1/nodes/w0/approve")).status_code == 200
        approved = srv.session().get(srv.url("/api/v1/nodes/w0")).json()
        assert "approval" not in approved and approved["updated"] is True
        waiting = as_admin(srv).get(srv.url("/api/v1/pools/worker")).json()["status"]["waitingForApproval"]
        assert waiting == {"count": 2, "nodes": ["w1", "w2"]}
        assert "Approval:" not in ncs("describe", "node", "w0", *client).stdout
