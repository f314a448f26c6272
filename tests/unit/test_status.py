"""RunRecorder / read_status on a real scratch root, and the ``node-agent status`` command."""

import json
import logging
import os
import subprocess
import sys

import pytest

from agent.cli import main
from agent.commands import status as status_cmd
from agent.errors import HostError
from agent.host import log
from agent.host.root import Root
from agent.node.status import RunRecorder, read_status


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def root(tmp_path):
    return Root(str(tmp_path))


@pytest.fixture(autouse=True)
def fresh_context():
    log.clear_context()
    yield
    log.clear_context()


def on_disk(root, name="status.json"):
    with open(os.path.join(root.top, "var/lib/node-agent", name)) as f:
        return json.load(f)


def test_a_full_run_is_recorded_with_stage_timings(root):
    clock = Clock()
    rec = RunRecorder(root, "firstboot", monotonic=clock)
    first = on_disk(root)
    assert first["result"] == "running" and first["stages"] == [] and first["schema"] == 1
    with rec.stage("fetch"):
        clock.t += 2.5
    with rec.stage("skew") as st:
        st.skip("no rules served")
    rec.set(pool="infra", config="rendered-infra-1", reboot_pending=True)
    with rec.stage("apply") as st:
        st.note("3 files, 1 unit")
        clock.t += 0.25
    clock.t += 1
    rec.finish("done", 0)

    data = on_disk(root)
    assert data == read_status(root)
    assert data["command"] == "firstboot" and data["runId"] == rec.run_id
    assert data["result"] == "done" and data["exitCode"] == 0 and data["error"] is None
    assert data["finishedAt"].endswith("Z") and data["startedAt"].endswith("Z")
    assert [(s["name"], s["result"], s["seconds"], s["detail"]) for s in data["stages"]] == [
        ("fetch", "ok", 2.5, None),
        ("skew", "skipped", 0.0, "no rules served"),
        ("apply", "ok", 0.25, "3 files, 1 unit"),
    ]
    assert data["seconds"] == 3.75
    assert (data["pool"], data["config"], data["rebootPending"]) == ("infra", "rendered-infra-1", True)
    assert on_disk(root, "status-firstboot.json") == data


def test_state_is_on_disk_while_a_stage_runs_and_after_it_fails(root):
    rec = RunRecorder(root, "firstboot")
    with pytest.raises(RuntimeError), rec.stage("fetch"):
        mid = on_disk(root)
        assert mid["stages"][-1]["name"] == "fetch" and mid["stages"][-1]["result"] == "running"
        raise RuntimeError("server unreachable")
    data = on_disk(root)  # what a crash right now would leave
    assert data["result"] == "running"
    assert data["stages"][-1]["result"] == "failed"
    assert data["stages"][-1]["detail"] == "server unreachable"
    rec.finish("failed", 69, error="server unreachable")
    data = on_disk(root)
    assert (data["result"], data["exitCode"], data["error"]) == ("failed", 69, "server unreachable")


def test_stage_logs_carry_the_stage_field_and_run_id(root, caplog):
    caplog.set_level(logging.INFO, logger="agent.node.status")
    seen = []

    class Grab(logging.Handler):
        def emit(self, record):
            seen.append((record.getMessage(), log.get_context().get("NODE_AGENT_STAGE"),
                         log.get_context().get("NODE_AGENT_RUN")))

    handler = Grab()
    logging.getLogger("agent.node.status").addHandler(handler)
    try:
        rec = RunRecorder(root, "update")
        with rec.stage("fetch"):
            pass
    finally:
        logging.getLogger("agent.node.status").removeHandler(handler)
    assert [s[1] for s in seen] == ["fetch", "fetch"]
    assert seen[0][0] == "stage fetch started"
    assert seen[1][0].startswith("stage fetch ok in ")
    assert {s[2] for s in seen} == {rec.run_id}
    assert log.get_context().get("NODE_AGENT_STAGE") is None  # restored after the stage


def test_set_puts_pool_and_config_in_the_log_context(root):
    rec = RunRecorder(root, "firstboot", run_id="abc")
    rec.set(pool="worker", config="rendered-worker-9")
    ctx = log.get_context()
    assert ctx["NODE_AGENT_POOL"] == "worker" and ctx["NODE_AGENT_CONFIG"] == "rendered-worker-9"
    assert ctx["NODE_AGENT_RUN"] == "abc" and ctx["NODE_AGENT_COMMAND"] == "firstboot"


def test_first_recorder_takes_the_logging_run_id_later_ones_get_their_own(root):
    log.set_context(NODE_AGENT_RUN="from-setup-logging")
    first = RunRecorder(root, "update")
    assert first.run_id == "from-setup-logging"
    second = RunRecorder(root, "update")
    assert second.run_id != first.run_id
    assert log.get_context()["NODE_AGENT_RUN"] == second.run_id


def test_finish_rejects_unknown_results(root):
    rec = RunRecorder(root, "firstboot")
    with pytest.raises(ValueError, match="running"):
        rec.finish("running", 0)


def test_failed_rename_leaves_the_previous_record_and_no_temp_file(root, monkeypatch, caplog):
    rec = RunRecorder(root, "firstboot")
    before = on_disk(root)

    def broken(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "rename", broken)
    with rec.stage("fetch"):
        pass
    monkeypatch.undo()
    assert on_disk(root) == before
    from agent.host.files import TMP_PREFIX

    assert [n for n in os.listdir(os.path.join(root.top, "var/lib/node-agent")) if n.startswith(TMP_PREFIX)] == []
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


def test_read_status_absent_and_invalid(root):
    assert read_status(root) is None
    path = os.path.join(root.top, "var/lib/node-agent")
    os.makedirs(path)
    with open(os.path.join(path, "status.json"), "w") as f:
        f.write("{not json")
    with pytest.raises(HostError, match="status.json is not valid JSON"):
        read_status(root)
    with open(os.path.join(path, "status.json"), "w") as f:
        json.dump({"schema": 7, "result": "done"}, f)
    with pytest.raises(HostError, match=r"\$\.schema is 7"):
        read_status(root)
    with open(os.path.join(path, "status.json"), "w") as f:
        json.dump({"schema": 1, "result": "weird"}, f)
    with pytest.raises(HostError, match=r"\$\.result is 'weird'"):
        read_status(root)


# ---------------------------------------------------------------------------- the command

def run_cli(capsys, *argv):
    code = main(["status", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_status_command_never_run(root, capsys):
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 1
    assert out.startswith("status: not run\n")
    assert "node-agent has not run" in out
    code, out, _ = run_cli(capsys, "--root", root.top, "--json")
    assert code == 1 and json.loads(out)["result"] == "not-run"


@pytest.mark.parametrize("result,exit_code,expected", [("done", 0, 0), ("failed", 75, 1), ("degraded", 0, 2)])
def test_status_command_exit_codes(root, capsys, result, exit_code, expected):
    rec = RunRecorder(root, "firstboot")
    rec.finish(result, exit_code, error=None if result == "done" else "something")
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == expected
    assert out.startswith(f"status: {result}\n")
    code, out, _ = run_cli(capsys, "--root", root.top, "--json")
    assert code == expected and json.loads(out)["result"] == result


def test_status_command_human_output(root, capsys):
    clock = Clock()
    rec = RunRecorder(root, "firstboot", monotonic=clock, run_id="r1")
    with rec.stage("fetch"):
        clock.t += 12.5
    with pytest.raises(RuntimeError), rec.stage("apply-files"):
        clock.t += 0.5
        raise RuntimeError("disk full")
    rec.set(pool="infra", reboot_pending=True)
    rec.finish("failed", 75, error="apply failed and was rolled back")
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 1
    lines = out.splitlines()
    assert lines[0] == "status: failed"
    assert "command: firstboot" in lines and "run: r1" in lines and "exit code: 75" in lines
    assert "pool: infra" in lines and "reboot pending: yes" in lines
    assert "error: apply failed and was rolled back" in lines
    stages = lines[lines.index("stages:") + 1:lines.index("stages:") + 3]
    assert stages[0].split() == ["12.500s", "fetch", "ok"]
    assert stages[1].split()[:3] == ["0.500s", "apply-files", "failed"] and "(disk full)" in stages[1]
    assert "A reboot is pending" in out


def test_status_after_update_also_summarises_first_boot(root, capsys):
    RunRecorder(root, "firstboot").finish("done", 0)
    log.clear_context()
    RunRecorder(root, "update").finish("degraded", 0, error="drain timed out")
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 2
    assert "command: update" in out
    assert "first boot: done (exit 0)" in out


def test_running_record_of_a_dead_process_is_interrupted():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    data = {"result": "running", "pid": child.pid}
    assert status_cmd.effective_result(data, Root("/")) == "interrupted"
    assert status_cmd.exit_code_for("interrupted") == 1
    # in a scratch root there is no telling, so it stays "running"
    assert status_cmd.effective_result(data, Root("/tmp")) == "running"


def test_status_wait_blocks_until_the_first_boot_has_ended(root, capsys):
    sleeps = []

    def sleep(seconds):
        sleeps.append(seconds)
        if len(sleeps) == 2:
            RunRecorder(root, "firstboot")  # started: still waiting
        if len(sleeps) == 4:
            log.clear_context()
            RunRecorder(root, "firstboot").finish("degraded", 0, error="report refused")

    status_cmd.wait_for_first_boot(root, "/var/lib/node-agent", sleep=sleep)
    assert len(sleeps) == 4
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 2 and out.startswith("status: degraded\n")


def test_a_kept_report_is_shown_and_a_refused_one_degrades(root, capsys):
    RunRecorder(root, "firstboot").finish("done", 0)
    kept = os.path.join(root.top, "var/lib/node-agent/pending-report.json")
    with open(kept, "w") as f:
        json.dump({"report": {"state": "Done"}, "keptAt": "T", "error": "not delivered: HTTP 503"}, f)
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 0 and "report: pending since T (not delivered: HTTP 503)" in out
    with open(kept, "w") as f:
        json.dump({"report": {"state": "Done"}, "keptAt": "T",
                   "refused": {"status": 400, "message": "invalid report", "server": "https://s"}}, f)
    code, out, _ = run_cli(capsys, "--root", root.top)
    assert code == 2 and out.startswith("status: degraded\n") and "HTTP 400: invalid report" in out


# -- issue 31: --long, --format, and a retrying fetch shown while it runs -------------------------------

def test_status_long_and_format_as_cloud_init(root, capsys):
    rec = RunRecorder(root, "firstboot", run_id="r9")
    with rec.stage("fetch"):
        pass
    rec.finish("done", 0)
    code, out, _ = run_cli(capsys, "--root", root.top, "--long")
    assert code == 0 and out.startswith("status: done\n")
    assert "record: " + os.path.join(root.top, "var/lib/node-agent/status.json") in out
    assert "[started " in out  # each stage's start
    code, out, _ = run_cli(capsys, "--root", root.top, "--format", "json")
    assert code == 0 and json.loads(out)["runId"] == "r9"
    code, alias, _ = run_cli(capsys, "--root", root.top, "--json")
    assert json.loads(alias) == json.loads(out)
    import yaml

    code, out, _ = run_cli(capsys, "--root", root.top, "--format", "yaml")
    assert code == 0 and yaml.safe_load(out)["result"] == "done"
    code, out, _ = run_cli(capsys, "--root", root.top, "--format", "tabular")
    assert code == 0 and out.startswith("status: done\n")
    code, out, _ = run_cli(capsys, "--root", root.top, "--format", "yaml", "--long")
    assert code == 0 and yaml.safe_load(out) == json.loads(alias)  # --long adds nothing to the record
    code, wide, _ = run_cli(capsys, "--root", root.top, "-o", "wide")  # as kubectl's wide: more detail, --long
    assert code == 0 and wide == run_cli(capsys, "--root", root.top, "--long")[1] and "[started " in wide
    empty = os.path.join(root.top, "empty-root")
    os.mkdir(empty)
    code, out, _ = run_cli(capsys, "--root", empty, "--format", "yaml")
    assert code == 1 and yaml.safe_load(out)["result"] == "not-run"
    code, out, err = run_cli(capsys, "--root", root.top + "/wroker-0", "--format", "yaml")  # a typo: not "never ran"
    assert code == 66 and out == "" and f"--root {root.top}/wroker-0: no such directory" in err
    with pytest.raises(SystemExit) as exit_:
        main(["status", "--format", "xml"])
    assert exit_.value.code == 2


def test_a_retrying_fetch_is_recorded_and_shown_while_it_runs(root, capsys):
    """While first boot runs, status showed "- fetch running": now the time so far, the attempt
    that failed and when the next one starts, from the fetcher's retry log records."""
    rec = RunRecorder(root, "firstboot")
    fetch_log = logging.getLogger("agent.resource.fetch")
    with rec.stage("fetch"):
        fetch_log.warning("attempt %d to fetch %s failed: %s; retrying in %.2fs", 3, "https://s:22623/config/w",
                          "cannot connect to server s:22623: Connection refused", 1.6,
                          extra={"NODE_AGENT_ATTEMPT": 3, "NODE_AGENT_DELAY": 1.6})
        stage = on_disk(root)["stages"][0]
        assert stage["attempt"] == 3 and stage["nextRetryAt"].endswith("Z")
        assert stage["lastError"] == "cannot connect to server s:22623: Connection refused"
        code, out, _ = run_cli(capsys, "--root", root.top)
        assert code == 0 and out.startswith("status: running\n")
        line = next(x for x in out.splitlines() if " fetch " in x)
        assert "running" in line and "s so far" in line and "s.." in line
        assert "attempt 3 failed: cannot connect to server s:22623" in line
        assert f"next retry at {stage['nextRetryAt']}" in line
    # the watcher ends with the stage: later records are not the fetch's
    fetch_log.warning("late", extra={"NODE_AGENT_ATTEMPT": 9, "NODE_AGENT_DELAY": 1})
    assert on_disk(root)["stages"][0]["attempt"] == 3


@pytest.mark.parametrize("result,expected", [("done", 0), ("running", 0), ("degraded", 2), ("failed", 1),
                                             ("interrupted", 1), (None, 1)])
def test_exit_codes_beside_cloud_init(result, expected):
    # cloud-init status: 0 done/running (and not run), 1 error, 2 degraded (recoverable error);
    # RHEL's cloud-init maps 2 back to 0 (RHEL-28549). Never run (None) is 1 here, knowingly.
    assert status_cmd.exit_code_for(result) == expected
