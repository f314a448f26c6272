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


ON_THE_SESSION_CLUSTER = """
import os, pytest

@pytest.fixture
def etcd_cluster():  # stands for the session cluster of tests/conftest.py (same name)
    return None

@pytest.mark.parametrize('i', range(6))
def test_x(i, etcd_cluster):
    print(os.environ['PYTEST_XDIST_WORKER'])
"""
OWN = """
import os, pytest

@pytest.mark.parametrize('i', range(6))
def test_y(i):
    print(os.environ['PYTEST_XDIST_WORKER'])
"""


def test_under_xdist_loadgroup_the_tests_on_a_session_cluster_run_on_one_worker_and_the_rest_anywhere(tmp_path):
    # make test's workers (Makefile, "suite" and "py39") rely on one cluster per group
    for group, module, text in (("etcd", "test_shared", ON_THE_SESSION_CLUSTER), ("etcd", "test_own", OWN),
                                ("unit", "test_also_shared", ON_THE_SESSION_CLUSTER)):
        (tmp_path / group).mkdir(exist_ok=True)
        (tmp_path / group / f"{module}.py").write_text(text)
    (tmp_path / "conftest.py").write_text(conftest_alone())
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-n", "3", "--dist",
                          "loadgroup", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    passed = [line.rstrip() for line in out.stdout.splitlines() if "PASSED" in line]
    shared = [line for line in passed if "shared.py" in line]
    assert len(shared) == 12 and all(line.endswith("@etcd") for line in shared), out.stdout
    assert len({line.split()[0] for line in shared}) == 1, out.stdout
    own = [line for line in passed if "test_own.py" in line]
    assert len(own) == 6 and not any("@" in line for line in own), out.stdout


def test_every_module_the_rhel9_run_deselects_as_run_once_is_there():
    """tests/conftest.py RUN_ONCE (marker once, deselected by make py39) names modules, not
    globs: a name a rename left behind would mark nothing, and the module run twice unnoticed."""
    from tests.conftest import RUN_ONCE
    tests_dir = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    assert [m for m in RUN_ONCE if not os.path.isfile(os.path.join(tests_dir, m))] == []
