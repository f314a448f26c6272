"""What a failed VM scenario prints (tests/vm/failure.py): a CI log is read from its end, so the
message ends with the one line that names the failed wait, after the serial console, the state of
the cluster and the server, and the guest's story. No guest here: the parts are fed what the
scenario feeds them."""

import os

import pytest

from tests.vm import failure
from tests.vm.guest import wait_until


class StoppedOrRunning:
    """What wait_until reads of a guest."""

    def __init__(self, alive: bool):
        self._alive = alive

    def alive(self) -> bool:
        return self._alive

    def serial_tail(self) -> str:
        return "the serial console, its tail:\n[  279.1] cni0: port 3(veth1) entered forwarding state"


def test_a_wait_that_times_out_names_what_it_waited_for_on_its_last_line_after_the_serial_console():
    with pytest.raises(failure.PhaseFailed) as caught:
        wait_until(lambda: None, 0, StoppedOrRunning(alive=True), "the node Done", poll=0)
    lines = str(caught.value).splitlines()
    assert lines[-1] == "the node Done: not seen within 0 s" == caught.value.cause
    assert "entered forwarding state" in lines[-2]


def test_a_guest_that_stopped_during_a_wait_is_the_cause():
    with pytest.raises(failure.PhaseFailed) as caught:
        wait_until(lambda: None, 60, StoppedOrRunning(alive=False), "the node Done", poll=0)
    assert caught.value.cause == "the guest stopped while waiting for the node Done"


def test_what_a_waiter_adds_comes_before_the_serial_console_and_the_cause_stays_last():
    exc = failure.PhaseFailed("the pod Ready: not seen within 900 s", "serial").with_detail("server pods: []")
    assert str(exc).splitlines() == ["server pods: []", "serial", "the pod Ready: not seen within 900 s"]


def test_the_report_begins_and_ends_with_the_cause_around_the_state_and_the_guests_story():
    exc = failure.PhaseFailed("the node Done: not seen within 900 s", "serial")
    failed = failure.report(exc, "--- the pods", "--- node-agent's journal")
    assert str(failed).splitlines() == [
        "THE VM SCENARIO FAILED: the node Done: not seen within 900 s", "serial", "the node Done: not seen within 900 s",
        "--- the pods", "--- node-agent's journal", "THE VM SCENARIO FAILED: the node Done: not seen within 900 s"]
    assert failed.digest.splitlines() == [  # for make test's end: no serial console
        "THE VM SCENARIO FAILED: the node Done: not seen within 900 s", "--- the pods", "--- node-agent's journal",
        "THE VM SCENARIO FAILED: the node Done: not seen within 900 s"]
    other = failure.report(AssertionError("the guest did not power off\nmore"), "", "")
    assert str(other).splitlines()[-1] == "THE VM SCENARIO FAILED: the guest did not power off"


class Down:
    def __getattr__(self, name):
        raise ConnectionError("connection refused")


def test_a_part_that_cannot_be_read_says_why_and_every_part_is_shown():
    text = failure.state(Down(), Down(), "vm-node-0", "vm", ["vm-workload"])
    assert [line for line in text.splitlines() if line.startswith("---")] == [
        "--- the Node, as the API server holds it", "--- the pods", "--- the pool and the node, as the server answers"]
    assert text.count("(could not be read: ConnectionError: connection refused)") == 3


def test_a_pod_line_says_where_it_runs_whether_ready_or_deleting_and_its_restarts():
    pod = {"metadata": {"namespace": "ns", "name": "p", "deletionTimestamp": "2026-12-01T00:00:00Z"},
           "spec": {"nodeName": "vm-node-0"},
           "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"name": "server", "restartCount": 1, "state": {"running": {}},
                                             "lastState": {"terminated": {"exitCode": 255}}}]}}
    assert failure._pod_line(pod) == ("ns/p on vm-node-0: Running ready=True deleting "
                                      "server: restarts=1 state=running last=terminated")


def test_the_guests_story_reads_the_newest_server_log_without_probes_and_says_what_it_did_not_find(tmp_path):
    story = failure.guest_story(str(tmp_path))
    assert "(no log of the server's pod on the guest's disk)" in story
    logs = tmp_path / "pods" / "node-config-server_node-config-server-x_uid" / "server"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("boot 2's line\n")
    os.utime(logs / "0.log", (1, 1))
    (logs / "1.log").write_text('probe "GET /healthz HTTP/1.1" 200\nboot 3\'s line\n' + "x" * 400 + "\n")
    lines = failure.guest_story(str(tmp_path)).split("--- the server pod's log on the guest, its last lines\n")[1]
    assert lines.splitlines() == ["  pods/node-config-server_node-config-server-x_uid/server/1.log:",
                                  "  boot 3's line", "  " + "x" * failure.WIDTH + " ..."]


def test_a_journal_part_with_no_journal_read_back_is_shown_empty_not_as_an_error(tmp_path):
    os.makedirs(tmp_path / "journal")
    story = failure.guest_story(str(tmp_path))
    assert "--- node-agent's journal, its last lines\n  " in story and "could not be read" not in story
