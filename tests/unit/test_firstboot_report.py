"""What a first boot tells the server of itself (agent/node/firstbootreport.py): the failure in
the very words of the run's one journal entry, the firstBoot object the server takes as it is
(agent/server/cluster/reports.py), and the URL the pointer config names before any fetch."""

import logging

import pytest

from agent.errors import ApplyError, FetchError
from agent.host.root import Root
from agent.node import firstbootreport as fbr
from agent.node.status import RunRecorder
from agent.server.cluster.reports import validate_report


def failed_run(tmp_path, exc):
    rec = RunRecorder(Root(str(tmp_path)), "firstboot", state_dir="/var/lib/node-agent")
    with rec.stage("fetch"):
        pass
    with pytest.raises(type(exc)):
        with rec.stage("apply"):
            raise exc
    return rec


@pytest.mark.parametrize("exc", [ApplyError("applying rendered-worker-1 failed at /etc/x: disk full; every change "
                                            "was rolled back"),
                                 FetchError("could not fetch https://h:22623/config/worker: refused",
                                            url="https://h:22623/config/worker"),
                                 ZeroDivisionError("division by zero")])
def test_a_failure_is_reported_in_the_words_of_the_runs_journal_entry(tmp_path, caplog, exc):
    rec = failed_run(tmp_path, exc)
    error, hint, code = fbr.failure_words(exc)
    with caplog.at_level(logging.ERROR, logger="agent.node.status"):
        rec.finish("failed", code, error=error, exc=exc)
    entry = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR][-1]
    assert entry.startswith(f"firstboot failed (exit {code}) in ") and entry.endswith(f": {error}\nwhat to do: {hint}")
    assert fbr.failed_stage(rec) == "apply"


def test_the_first_boot_object_is_what_the_server_takes(tmp_path):
    rec = failed_run(tmp_path, ApplyError("disk full"))
    error, hint, code = fbr.failure_words(ApplyError("disk full"))
    sent = fbr.first_boot_object(rec, fbr.failed_stage(rec), "failed", code, hint + "x" * 2000)
    assert (sent["run"], sent["stage"], sent["result"], sent["exitCode"]) == (rec.run_id, "apply", "failed", 75)
    assert [s["name"] for s in sent["stages"]] == ["fetch", "apply"] and sent["stages"][1]["result"] == "failed"
    assert len(sent["hint"]) == fbr.MAX_TEXT and sent["elapsed"] >= 0
    body = validate_report({"pool": "worker", "state": "Degraded", "reason": error, "firstBoot": sent})
    assert body["firstBoot"]["stages"] == sent["stages"]


def test_the_pointer_names_the_pools_config_url_before_anything_is_fetched():
    url = "https://api.example.com:22623/config/infra"
    merge = {"ignition": {"version": "3.4.0", "config": {"merge": [{"source": "data:,{}"}, {"source": url}]}}}
    replace = {"ignition": {"version": "3.4.0", "config": {"replace": {"source": url}}}}
    assert fbr.pointer_url(merge) == fbr.pointer_url(replace) == url
    assert fbr.pointer_url({"ignition": {"config": {"merge": "not a list"}}}) == ""
    assert fbr.pointer_url({"ignition": {"version": "3.4.0"}}) == ""
