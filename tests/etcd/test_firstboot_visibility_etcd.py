"""The five first boots that go wrong (tests/helpers/firstboot_faults.py) against two replicas
sharing the session's etcd: the node talks to one, and both name every failed and stalled first
boot the same, with its stage and reason; a stall is decided from the shared record and the
clock, by no replica's timer. SQLite: tests/server/test_firstboot_visibility.py."""

import os
import shutil
import uuid

import pytest

from tests.helpers import firstboot_faults as faults
from tests.helpers.certs import make_tls
from tests.helpers.etcd_cluster import have_etcd
from tests.helpers.server_proc import REPO, ServerProcess
from tests.helpers.wait import wait_for

pytestmark = pytest.mark.skipif(not have_etcd(), reason="etcd-server is not installed (make test installs it)")

TOKEN = "fb-etcd-token"
DEADLINE = 5.0  # longer than a loaded machine's gaps between two reports of these first boots


@pytest.fixture(scope="module")
def replicas(tmp_path_factory, etcd_cluster):
    top = tmp_path_factory.mktemp("fb-etcd")
    state = str(top / "state")
    shutil.copytree(os.path.join(REPO, "examples", "state"), state)
    faults.write_source_pool(state)
    tls = make_tls(str(top / "tls"))
    url = f"{etcd_cluster.url}/firstboots-{uuid.uuid4().hex[:8]}/"
    args = ["--store", url, "--firstboot-deadline", f"{DEADLINE:g}"]
    with ServerProcess(state, tls=tls, token=TOKEN, workers=1, extra_args=args) as one, \
            ServerProcess(state, tls=tls, token=TOKEN, workers=1, extra_args=args) as two:
        yield one, two


def test_both_replicas_name_each_failed_and_stalled_first_boot_with_its_stage(replicas, tmp_path):
    one, two = replicas
    views = [lambda node, srv=srv: faults.node_view(srv.session(), srv.base_url, node) for srv in (one, two)]
    runs = faults.run_all(one.session(), one.base_url, one.tls.ca_pem(), TOKEN, str(tmp_path), "fbe-", wait_for,
                          DEADLINE, views=views)
    print("first boots shown by both replicas after (s):", faults.summary(runs))
    for run in runs.values():
        shown = [read(run.node)["firstBoot"] for read in views]
        assert [(fb["outcome"], fb["stage"]) for fb in shown] == [(run.scenario.outcome, run.scenario.stage)] * 2
        if run.scenario.outcome == "Failed":
            assert shown[0]["exitCode"] == shown[1]["exitCode"] == run.exit_code
            assert shown[0]["hint"] == shown[1]["hint"] and shown[0]["hint"] in run.stderr
            assert run.at_exit["outcome"] == "Failed"  # on the replica it reported to: its own write
        else:
            assert run.after_last_report >= DEADLINE  # on both: decided from the shared record and the clock
    counts = [srv.session().get(srv.url("/api/v1/pools/worker")).json()["status"]["firstBoots"] for srv in (one, two)]
    assert [(c["failed"], c["stalled"]) for c in counts] == [(2, 1), (2, 1)]

    faults.recover(runs)
    for node in ("fbe-killed-after-fetch", "fbe-reboot-never-back"):
        for read in views:
            wait_for(lambda node=node, read=read: read(node)["firstBoot"]["outcome"] == "Done", f"{node} Done")
