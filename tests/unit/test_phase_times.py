"""``make test`` prints each phase's time (tools/phase.sh, issue 54): at the last phase, and at the
first that fails, whose exit code it keeps."""

import os
import re
import subprocess

from tests.helpers import paths

PHASE = os.path.join(paths.REPO, "tools", "phase.sh")


def phase(file, name, *cmd):
    return subprocess.run(["bash", PHASE, str(file), name, *cmd], capture_output=True, text=True, timeout=60)


def test_the_last_phase_prints_every_phase_and_the_total(tmp_path):
    times = tmp_path / "phases.txt"
    assert phase(times, "set-up (make prepare)", "true").stdout == ""
    out = phase(times, "suite, RHEL 9 (py39)", "--last", "true")
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[0] == "make test: time per phase"
    assert [re.sub(r"\s+\d+m \d\ds$", "", line).strip() for line in lines[1:]] == \
        ["set-up (make prepare)", "suite, RHEL 9 (py39)", "all"]


def test_a_failed_phase_prints_the_times_so_far_and_keeps_its_exit_code(tmp_path):
    times = tmp_path / "phases.txt"
    phase(times, "lint and compat", "true")
    out = phase(times, "VM scenario (vm-boot)", "bash", "-c", "exit 3")
    assert out.returncode == 3
    assert "VM scenario (vm-boot)" in out.stdout and "FAILED (exit 3)" in out.stdout
    assert "lint and compat" in out.stdout


def test_the_parts_run_side_by_side_are_listed_with_their_phase_and_not_counted_twice(tmp_path):
    times = tmp_path / "phases.txt"
    assert phase(times, "VM scenario (vm-boot)", "--part", "sleep", "2").returncode == 0
    failed = phase(times, "suite, Python 3.11", "--part", "bash", "-c", "exit 5")
    assert failed.returncode == 5 and failed.stdout == ""  # the phase that ran it prints the table
    out = phase(times, "VM scenario + suite", "--last", "true")
    lines = out.stdout.splitlines()
    assert [re.sub(r"\s+\d+m \d\ds.*$", "", line).strip() for line in lines[1:]] == \
        ["VM scenario (vm-boot)", "suite, Python 3.11", "VM scenario + suite", "all"]
    assert "FAILED (exit 5)" in lines[2] and lines[1].startswith("    ")  # a part is indented under its phase
    minutes, seconds = re.search(r"(\d+)m (\d\d)s$", lines[-1]).groups()
    assert int(minutes) * 60 + int(seconds) < 2  # the phase took no time; its part's 2 s are not added
