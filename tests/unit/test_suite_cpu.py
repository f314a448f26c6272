"""tools/suite_cpu_report.py: a run's processes from the kernel's accounting records, each counted
once, to the right kind (by command line where seen) and to the test its worker was running."""

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tools.suite_cpu_report import (
    SERVE,
    SERVE_WORKER,
    V3,
    WORKER,
    comp_t,
    kind_of,
    records,
    report,
    where,
)

EXECNET = ["/venv/bin/python", "-u", "-c", "import sys;exec(eval(sys.stdin.readline()))"]
SERVE_ARGV = ["/venv/bin/python", "-m", "agent.server.cli", "serve", "--listen", "127.0.0.1:1"]


def record(pid, ppid, comm, cpu_ticks, btime, elapsed=1.0, forked=False):
    """An acct_v3 record as the kernel writes it (CPU in ticks below 8192: comp_t's mantissa)."""
    return V3.pack(1 if forked else 0, 3, 0, 0, 0, 0, pid, ppid, btime, elapsed * 100,
                   cpu_ticks, 0, 0, 0, 0, 0, 0, 0, comm.encode())


def test_comp_t_is_a_13_bit_mantissa_times_eight_to_the_exponent():
    assert comp_t(5) == 5
    assert comp_t((2 << 13) | 3) == 3 * 64


def test_a_record_gives_pid_parent_cpu_seconds_and_whether_it_forked_without_exec():
    [r] = records(record(10, 1, "python3", 250, 1000, forked=True))
    assert (r["pid"], r["ppid"], r["comm"], r["cpu"], r["forked"]) == (10, 1, "python3", 2.5, True)


def test_a_record_of_another_version_is_refused_naming_the_kernel_option():
    data = bytearray(record(10, 1, "sh", 1, 1000))
    data[1] = 2
    with pytest.raises(ValueError, match="CONFIG_BSD_PROCESS_ACCT_V3"):
        list(records(bytes(data)))


@settings(max_examples=50, deadline=None)
@given(st.binary(max_size=4 * V3.size))
def test_records_of_any_bytes_end_or_name_the_bad_version(data):
    try:
        assert len(list(records(data))) == len(data) // V3.size
    except ValueError as exc:
        assert "version" in str(exc)


def test_a_server_forked_by_a_server_is_its_worker_and_an_exec_ed_one_its_master():
    assert kind_of("python", SERVE_ARGV, False, WORKER) == SERVE
    assert kind_of("python", SERVE_ARGV, True, SERVE) == SERVE_WORKER
    assert kind_of("python", EXECNET, False, "pytest controller") == WORKER


def test_a_process_of_unknown_name_is_its_forking_parents_and_a_control_plane_by_its_name():
    assert kind_of("kube-controller", None, False, WORKER) == "kube-controller-manager"
    assert kind_of("python3", None, True, WORKER) == WORKER
    assert kind_of("gzip", None, False, WORKER) is None


def test_a_process_started_between_a_workers_tests_belongs_to_none():
    lines = [{"t": 1.0, "at": "start", "test": "tests/kube/test_a.py::t1"},
             {"t": 2.0, "at": "end", "test": "tests/kube/test_a.py::t1"}]
    assert where(lines, 1.5) == ("tests/kube", "tests/kube/test_a.py")
    assert where(lines, 2.5)[0] == "(between tests)"
    assert where(lines, 0.5)[0] == "(between tests)"


def write_run(tmp_path, recs, procs, tests):
    (tmp_path / "pacct").write_bytes(b"".join(recs))
    (tmp_path / "procs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in procs))
    (tmp_path / "tests-20.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tests))
    (tmp_path / "run.json").write_text(json.dumps({"runner": 5, "command_pid": 10, "command": ["pytest"],
                                                   "status": 0, "start": 1000.0, "end": 1100.0}))


def test_the_report_counts_each_process_of_the_run_once_to_its_kind_and_its_tests_folder(tmp_path):
    recs = [
        record(10, 5, "python", 100, 1000, 100),  # pytest's controller
        record(20, 10, "python", 300, 1001, 99),  # its worker
        record(30, 20, "python", 50, 1010, 10),  # a server the worker started in the test
        record(31, 30, "python", 20, 1011, 9, forked=True),  # its gunicorn worker
        record(40, 5, "etcd", 70, 1020, 5),  # a daemon that left its parent: the runner adopted it
        record(30, 7, "python", 999, 1050, 1),  # pid 30 again, another user's: not the run's
        record(50, 20, "gzip", 10, 1090, 1),  # after the test ended
    ]
    procs = [{"pid": 10, "ppid": 5, "start": 1000.1, "comm": "python", "argv": ["/venv/bin/pytest", "-n", "1"]},
             {"pid": 20, "ppid": 10, "start": 1001.2, "comm": "python", "argv": EXECNET},
             {"pid": 40, "ppid": 20, "start": 1020.5, "comm": "etcd", "argv": ["/usr/bin/etcd"]}]
    tests = [{"test": "tests/etcd/test_e.py::t", "pid": 20, "t": 1005.0, "cpu": 0.5, "at": "start"},
             {"test": "tests/etcd/test_e.py::t", "pid": 20, "t": 1080.0, "cpu": 2.0, "at": "end"},
             {"popen": 30, "argv": SERVE_ARGV, "t": 1010.2}]
    write_run(tmp_path, recs, procs, tests)
    text = report(str(tmp_path))
    rows = {r.split("|")[1].strip(): [c.strip() for c in r.split("|")[2:-1]] for r in text.splitlines()
            if r.startswith("| ")}
    assert rows[SERVE][:2] == ["1", "0.5"] and rows[SERVE_WORKER][:2] == ["1", "0.2"]
    assert rows["etcd"][:2] == ["1", "0.7"] and rows[WORKER][:2] == ["1", "3.0"]
    assert "CPU 6 s" in text  # 1 + 3 + 0.5 + 0.2 + 0.7 + 0.1; the other user's pid 30 is not counted
    # the worker's own 1.5 s in the test and its server and adopted etcd: the test's folder
    assert rows["tests/etcd"][:3] == ["1.5", "1.4", "2.9"]
    assert rows["(between tests)"][1] == "0.1"


def test_records_are_64_bytes_as_the_kernel_writes_them():
    assert V3.size == 64 == struct.calcsize("<BBHIIIIIIf8H16s")
