"""The rule of ``make test``: a test that would skip for want of a tool fails instead."""

import os
import subprocess
import sys

from tests.helpers import paths

SKIPPING = '''
import pytest

def test_needs_a_tool():
    pytest.skip("frobnicate is not installed")

@pytest.mark.skipif(True, reason="no quux")
def test_needs_another():
    pass
'''


def conftest_alone():
    """tests/conftest.py without its imports of tests.helpers (used only inside its cluster
    fixtures): a copy in a scratch directory, where the package tests is not importable."""
    with open(os.path.join(paths.REPO, "tests", "conftest.py")) as f:
        return "".join(line for line in f if not line.startswith("from tests."))


def run(tmp_path, no_skip, group="unit"):
    (tmp_path / group).mkdir()
    (tmp_path / group / "test_x.py").write_text(SKIPPING)
    (tmp_path / "conftest.py").write_text(conftest_alone())
    env = dict(os.environ, NODE_AGENT_NO_SKIP="1" if no_skip else "0")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


def test_under_make_test_a_skip_fails_naming_what_is_missing(tmp_path):
    out = run(tmp_path, no_skip=True)
    assert out.returncode == 1, out.stdout
    assert "frobnicate is not installed" in out.stdout and "no quux" in out.stdout
    assert " skipped" not in out.stdout.splitlines()[-1]


def test_a_bare_pytest_may_skip_and_says_why(tmp_path):
    out = run(tmp_path, no_skip=False)
    assert out.returncode == 0, out.stdout
    assert "2 skipped" in out.stdout.splitlines()[-1] and "frobnicate is not installed" in out.stdout


def test_a_test_outside_the_groups_of_tests_is_a_usage_error_naming_the_groups(tmp_path):
    out = run(tmp_path, no_skip=False, group="misc")
    assert out.returncode == 4, out.stdout + out.stderr
    assert "tests/{unit,host,server,etcd,kube,vm,campaigns}/" in out.stdout + out.stderr


def test_under_xdist_loadgroup_a_shared_cluster_folder_runs_on_one_worker(tmp_path):
    # make test's workers (Makefile, "suite" and "py39") rely on tests/etcd and tests/kube staying whole
    for group in ("etcd", "unit"):
        (tmp_path / group).mkdir()
        (tmp_path / group / f"test_{group}.py").write_text(
            "import os, pytest\n@pytest.mark.parametrize('i', range(6))\n"
            "def test_x(i):\n    print(os.environ['PYTEST_XDIST_WORKER'])\n")
    (tmp_path / "conftest.py").write_text(conftest_alone())
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "3", "--dist",
                          "loadgroup", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    workers = {line.split()[0] for line in out.stdout.splitlines() if "test_etcd.py" in line and "PASSED" in line}
    assert len(workers) == 1 and all("@etcd" in line for line in out.stdout.splitlines()
                                     if "test_etcd.py" in line and "PASSED" in line), out.stdout


def test_every_module_the_rhel9_run_deselects_as_run_once_is_there():
    """tests/conftest.py RUN_ONCE (marker once, deselected by make py39) names modules, not
    globs: a name a rename left behind would mark nothing, and the module run twice unnoticed."""
    from tests.conftest import RUN_ONCE
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert [m for m in RUN_ONCE if not os.path.isfile(os.path.join(tests_dir, m))] == []
