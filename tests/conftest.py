"""Fixtures shared by several test modules, and the no-skip rule of ``make test``.

Under ``make test`` (and so CI) ``NODE_AGENT_NO_SKIP=1`` is set: a test that skips because a tool
or file it needs is missing fails instead, naming what was missing, so a machine that lacks
something can never pass by running less. A bare ``pytest`` still skips, and says why (``-ra``).
"""

import json
import os
import shutil
import sys
import threading

import pytest

from tests.helpers.etcd_cluster import ETCD, EtcdCluster, have_etcd
from tests.helpers.kube_cluster import BINARIES, KUBECTL, NO_NODE_LIFECYCLE, KubeCluster, find_kube_bin

EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "state")
NO_SKIP = os.environ.get("NODE_AGENT_NO_SKIP") == "1"


# The CRDs' CEL rules are evaluated by cel-python, which needs PyYAML >= 6 and so cannot be
# installed beside RHEL 9's PyYAML 5.4: the RHEL 9 run (make py39, Python 3.9) neither collects the
# modules that import it nor runs the tests marked cel (-m "not cel"); the first run of make test
# (the newest libraries) runs them all, and a missing cel-python there fails.
collect_ignore = ["unit/test_crd_validate.py", "unit/test_crd_written.py"] if sys.version_info < (3, 10) else []

# tests/<group>/ says what a test needs; each group is a marker of the same name (pyproject.toml),
# so `pytest -m "not kube and not vm"` is the quick loop. CONTRIBUTING.md has the map.
GROUPS = ("unit", "host", "server", "etcd", "kube", "vm", "campaigns")
# The session clusters (below) and the group of the tests that use each: under pytest-xdist's
# --dist loadgroup (make test) a group runs on one worker, so one cluster serves all of its tests.
# A test that asks for one only for some parameters (request.getfixturevalue) names the group on
# that parameter (pytest.param(..., marks=pytest.mark.xdist_group("kube"))).
SESSION_CLUSTERS = {"etcd_cluster": "etcd", "kube_cluster": "kube"}
# The folder whose tests share one guest whatever fixtures they use.
SHARED_FOLDERS = ("vm",)
# Modules that check the project's documents, test helpers, tools, benchmarks, manifests and
# packaging, not the Python the RPMs ship: what interpreter runs them does not change what they
# show, so they carry the marker ``once`` and the RHEL 9 run (make py39) deselects them (issue 54).
# test_packaging_el9 runs the RHEL 9 payload with .venv39's Python whatever runs pytest.
RUN_ONCE = ("unit/test_doc_sections.py", "unit/test_readme.py", "unit/test_architecture.py",
            "unit/test_no_skip_rule.py", "unit/test_bench_rollout.py", "unit/test_image_archive.py",
            "unit/test_rbac_list.py", "unit/test_phase_times.py", "unit/test_monitoring_manifests.py",
            "unit/test_xdist_grouping.py", "unit/test_suite_cpu.py", "unit/test_py39_reach.py", "kube/test_kube_reset.py",
            "server/test_readme_commands.py", "host/test_packaging.py", "host/test_packaging_el9.py",
            "host/test_alert_rules.py")

# The RHEL 9 run calls every function of agent/ that it called as a whole through the modules this
# file chose (tools/py39_reach.py, measured with coverage on .venv39): the others carry the marker
# ``reached`` and make py39 deselects them; `make suite` runs them. A module the file does not
# name, a new one, runs in both.
PY39_SELECTION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "py39_selection.json")


def reached_elsewhere(path=PY39_SELECTION):
    """The test modules (relative to tests/) whose functions of agent/ others call on Python 3.9."""
    with open(path, encoding="utf-8") as f:
        modules = json.load(f)["modules"]
    return {name[len("tests/"):] for name, about in modules.items() if not about["run"]}


# (Without the file every module runs: test_no_skip_rule's copies of this conftest have none;
# tests/unit/test_py39_reach.py fails where the project's is missing.)
REACHED_ELSEWHERE = reached_elsewhere() if os.path.exists(PY39_SELECTION) else set()


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist reads the xdist_group marks (loadgroup)
def pytest_collection_modifyitems(config, items):
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        where = os.path.relpath(str(item.path), tests_dir).replace(os.sep, "/")
        group = where.split("/")[0]
        if group not in GROUPS:
            raise pytest.UsageError(f"{item.nodeid}: every test lives in one of tests/{{{','.join(GROUPS)}}}/ "
                                    "(CONTRIBUTING.md, 'Where tests live')")
        item.add_marker(getattr(pytest.mark, group))
        if where in RUN_ONCE:
            item.add_marker(pytest.mark.once)
        if where in REACHED_ELSEWHERE:
            item.add_marker(pytest.mark.reached)
        if group in SHARED_FOLDERS:
            item.add_marker(pytest.mark.xdist_group(group))
    shared = _modules_on_a_session_cluster(items)
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:  # its folder's, its own or its parameter's
            continue
        module = item.nodeid.split("::")[0]
        cluster = _session_cluster_group(item)
        if cluster is not None:
            item.add_marker(pytest.mark.xdist_group(cluster))
        elif _uses_a_module_fixture(item):
            item.add_marker(pytest.mark.xdist_group(shared.get(module, module)))


def _session_cluster_group(item):
    """The group of the session cluster the test uses (SESSION_CLUSTERS), or None. Only those
    tests are kept together: a module with a control plane of its own (test_kube_backend), or one
    that finds its worker's as a new one (kube_cluster_reset), runs on any worker (issue 54: the
    whole of tests/kube, one group, took 405 s on one worker)."""
    names = set(getattr(item, "fixturenames", ()))
    if "kube_cluster_reset" in names:  # its module finds the cluster new, on whatever worker it runs
        names.discard("kube_cluster")
    used = [group for fixture, group in SESSION_CLUSTERS.items() if fixture in names]
    return used[-1] if used else None  # both: the control plane's worker (etcd is the cheaper to start twice)


def _modules_on_a_session_cluster(items):
    """module -> the session cluster's group of one of its tests: the module's tests that use a
    fixture of its own go there too, so that fixture is made once (on that worker)."""
    found = {}
    for item in items:
        cluster = _session_cluster_group(item)
        if cluster is not None:
            found.setdefault(item.nodeid.split("::")[0], cluster)
    return found


def _uses_a_module_fixture(item) -> bool:
    """Whether the test uses a fixture made once per module (or class): a server, a cluster.

    --dist loadgroup sends an ungrouped test to any worker, and each worker that gets one of a
    module's tests makes the module's fixtures again: up to three servers, walks or clusters where
    one serves them all (issue 54: 20-30 s setups seen twice in one run). Grouping the tests that
    use them by module makes each once; the module's other tests still go to any worker.
    """
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    module = item.nodeid.split("::")[0]
    # Only the module's own (defined or imported there): a conftest's module-scoped fixture is the
    # autouse check below, made per module wherever the module runs, and costs nothing.
    return any(defs[-1].scope in ("module", "class") and defs[-1].baseid == module
               for defs in info.name2fixturedefs.values() if defs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not NO_SKIP or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"skipped under make test, which runs every test: {reason}\n"
                       "what to do: install what is named (make sysdeps does, as root), or run a bare pytest, "
                       "which may skip")


@pytest.fixture(scope="session")
def etcd_cluster(tmp_path_factory):
    """One real three-member etcd cluster on loopback for every test that asks for it (each test
    keeps its keys under its own prefix); started once, stopped at the end of the session."""
    if not have_etcd():
        pytest.skip("etcd-server is not installed (make test installs it)")
    with EtcdCluster(str(tmp_path_factory.mktemp("etcd"))) as c:
        yield c


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    """One control plane for the session (of each pytest worker) for every test that asks for
    it; tests keep to namespaces or names of their own. Defined here, never imported into a test
    module: there it would be that module's own, one more control plane kept to the end."""
    bin_dir = find_kube_bin()
    if not bin_dir:
        pytest.skip(f"{'/'.join(BINARIES)} 1.20.2 are not built: run make kube-bin "
                    "(make test does; 10-15 minutes once, then cached)")
    if not os.access(ETCD, os.X_OK) or not os.access(KUBECTL, os.X_OK):
        pytest.skip("etcd (etcd-server) or kubectl is not installed (make sysdeps installs etcd-server)")
    with KubeCluster(str(tmp_path_factory.mktemp("kube")), bin_dir, tls_bootstrap=True,
                     controller_manager_args=NO_NODE_LIFECYCLE) as kc:
        yield kc


@pytest.fixture(scope="module")
def kube_cluster_reset(kube_cluster):
    """The worker's control plane (kube_cluster) as a new one looks to the module, for a module
    whose server reads every pool and Node: what earlier tests made is removed first
    (KubeCluster.reset), and what the module made once it ends (the session cluster's other
    tests find it as new, an ``infra`` pool of their own included). Such a module runs on any
    worker (_session_cluster_group), on that worker's control plane, instead of starting one of
    its own (issue 54)."""
    kube_cluster.reset()
    yield kube_cluster
    kube_cluster.reset()


@pytest.fixture
def state(tmp_path):
    """A scratch copy of examples/state (without a node database an older run may have left)."""
    d = tmp_path / "state"
    shutil.copytree(EXAMPLES, d)
    for leftover in d.glob("nodes.db*"):
        leftover.unlink()
    return str(d)


# A server's background threads outliving its test read and write on while other tests run: with
# pyfakefs active they saw the fake filesystem and logged into another test's caplog (CI of stop 50).
SERVER_THREADS = ("pool-queue",)


@pytest.fixture(scope="module", autouse=True)
def no_server_thread_outlives_its_module():
    """Every in-process App is closed by the tests that made it (``new_app`` does it)."""
    before = set(threading.enumerate())
    yield
    left = [t.name for t in threading.enumerate() if t.name in SERVER_THREADS and t not in before]
    assert not left, (f"threads left running by this module's in-process servers: {left}; "
                      "what to do: make the App with the new_app fixture, or call its close()")


@pytest.fixture
def new_app():
    """``App(...)`` for an in-process server, closed (its threads stopped) after the test."""
    from agent.server.http.app import App

    made = []

    def make(*args, **kwargs):
        made.append(App(*args, **kwargs))
        return made[-1]

    yield make
    for app in made:
        app.close()
