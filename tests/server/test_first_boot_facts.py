"""``describe node`` keeps what the node's first boot established (first pivot config, boot image,
its skew verdict) after day-2 reports, which carry none of them (agent/server/cluster/firstbootfacts.py)."""

import shutil

from agent.server.cli import views
from agent.server.cluster.firstbootfacts import with_first_boot_facts
from tests.kube.test_identity import ADMIN, BOOT, EXAMPLE, call, register, report, target

NOW = 1800000000.0
FIRST = {"state": "Working", "firstPivotConfig": "rendered-worker-1", "bootImage": "418.94.1", "skew": "ok"}


def test_a_day2_report_keeps_the_first_boots_pivot_config_boot_image_and_skew():
    day2 = {"state": "Done", "currentConfig": "rendered-worker-2"}
    kept = with_first_boot_facts(FIRST, day2)
    assert kept == dict(day2, firstPivotConfig="rendered-worker-1", bootImage="418.94.1", skew="ok")
    assert "firstPivotConfig" not in day2  # the caller's body is not changed


def test_a_new_first_boot_report_replaces_the_old_first_boot_facts():
    again = {"state": "Working", "firstPivotConfig": "rendered-worker-9", "skew": "warn"}
    assert with_first_boot_facts(FIRST, again) == again


def test_the_first_report_of_a_node_is_taken_as_sent():
    assert with_first_boot_facts(None, {"state": "Done"}) == {"state": "Done"}


def test_describe_node_after_a_day2_report_shows_the_first_boot_facts(tmp_path, new_app):
    state = tmp_path / "state"
    shutil.copytree(EXAMPLE, state)
    app = new_app(str(state), token=BOOT, admin_token=ADMIN, reload_interval=0.0)
    cred = register(app, "w1")
    config = target(app)
    first = dict(FIRST, firstPivotConfig=config)
    assert report(app, "w1", cred, **first)[0] == 200
    assert report(app, "w1", cred, currentConfig=config, desiredConfig=config)[0] == 200
    status, node = call(app, "GET", "/api/v1/nodes/w1", ADMIN)
    assert status == 200, node
    text = views.describe_node(node, None, NOW)
    assert f"First pivot config:  {config}" in text
    assert "Boot image:          418.94.1" in text
    assert "Boot image skew:     ok" in text
