"""Issue 57, item 5: small things an operator met. ``rollback pool`` and ``ack pool`` of an
unknown pool name the known pools (as ``get`` and ``describe`` do); ``rollback --dry-run`` says
"would roll back pool worker from A to B"."""

import shutil

from agent.server.cli.rollbackcmd import plan_text
from tests.kube.test_identity import ADMIN, BOOT, EXAMPLE, call, refused


def test_rollback_and_ack_of_an_unknown_pool_name_the_known_pools(tmp_path, new_app):
    shutil.copytree(EXAMPLE, tmp_path / "state")
    app = new_app(str(tmp_path / "state"), token=BOOT, admin_token=ADMIN)
    for what in ("rollback", "ack"):
        message = refused(call(app, "POST", f"/api/v1/pools/wroker/{what}", ADMIN), 404, "unknown pool 'wroker'")
        assert message.endswith("; known pools: infra, master, worker"), message
    again = refused(call(app, "POST", "/api/v1/pools/worker/rollback", ADMIN), 409, "nothing to roll back")
    assert "known pools" not in again


def test_the_rollback_plan_says_would_roll_back_pool_then_will():
    plan = {"pool": "worker", "from": "rendered-worker-c", "to": "rendered-worker-a", "nodes": ["w0"]}
    assert plan_text(plan, dry_run=True) == ("would roll back pool worker from rendered-worker-c to rendered-worker-a; "
                                            "1 node(s) to retarget, in turn: w0")
    assert plan_text(dict(plan, undo=True, nodes=[])) == (
        "will undo the rollback of pool worker from rendered-worker-c to rendered-worker-a; no node to retarget")
