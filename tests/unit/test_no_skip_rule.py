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


def run(tmp_path, no_skip, group="unit"):
    (tmp_path / group).mkdir()
    (tmp_path / group / "test_x.py").write_text(SKIPPING)
    conftest = os.path.join(paths.REPO, "tests", "conftest.py")
    (tmp_path / "conftest.py").write_text(open(conftest).read().replace(
        "from tests.helpers.etcd_cluster import EtcdCluster, have_etcd\n", ""))
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
