"""The suite's own scheduling (tests/conftest.py): a test that uses a module-scoped fixture runs on
the worker of its module's others, so the fixture is made once under `make test`'s xdist workers."""
import pytest


@pytest.fixture(scope="module")
def made_once():
    return object()


def test_a_test_using_a_module_fixture_is_grouped_with_its_module(request, made_once):
    mark = request.node.get_closest_marker("xdist_group")
    assert mark is not None and mark.args == (request.node.nodeid.split("::")[0],)


def test_a_test_using_only_function_fixtures_is_not_grouped(request, tmp_path):
    assert request.node.get_closest_marker("xdist_group") is None


def test_only_the_tests_on_a_session_cluster_share_its_worker_and_their_modules_fixtures_go_with_them():
    """tests/kube was one group (405 s on one worker, issue 54) though most of its modules start a
    control plane of their own: now only the tests that use a session cluster are kept together."""
    from types import SimpleNamespace

    from tests.conftest import _modules_on_a_session_cluster, _session_cluster_group

    on_kube = SimpleNamespace(fixturenames=["tmp_path", "kube_cluster"], nodeid="tests/kube/test_a.py::test_x")
    on_etcd = SimpleNamespace(fixturenames=["etcd_cluster"], nodeid="tests/etcd/test_b.py::test_y")
    own_cluster = SimpleNamespace(fixturenames=["tmp_path", "cluster"], nodeid="tests/kube/test_c.py::test_z")
    assert [_session_cluster_group(i) for i in (on_kube, on_etcd, own_cluster)] == ["kube", "etcd", None]
    assert _modules_on_a_session_cluster([on_kube, on_etcd, own_cluster]) == {
        "tests/kube/test_a.py": "kube", "tests/etcd/test_b.py": "etcd"}


def test_a_module_on_its_workers_reset_control_plane_runs_on_any_worker_with_its_tests_together():
    """A module whose tests use kube_cluster_reset (via a module fixture of its own) finds its
    worker's control plane as a new one: it is not kept to the session cluster's worker, so eight
    such modules spread over the workers, each worker's one control plane serving those it got."""
    from types import SimpleNamespace

    from tests.conftest import _session_cluster_group

    on_reset = SimpleNamespace(fixturenames=["kube", "kube_cluster_reset", "kube_cluster"],
                               nodeid="tests/kube/test_d.py::test_w")
    assert _session_cluster_group(on_reset) is None


def session_fixtures_in(tree):
    """The names of the session-scoped fixtures a module defines (``@pytest.fixture(scope="session")``)."""
    import ast

    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for dec in node.decorator_list:
                if isinstance(dec, ast.Call) and any(k.arg == "scope" and getattr(k.value, "value", None) == "session"
                                                     for k in dec.keywords):
                    yield node.name


def test_no_test_module_defines_or_imports_a_session_fixture():
    """A session fixture a test module defines or imports is that module's own: made again for it
    and kept alive to the session's end (six control planes at once under tests/kube, issue 54).
    Session fixtures live in a conftest.py, made once per worker."""
    import ast
    import glob
    import os

    from tests.helpers import paths

    tests = os.path.join(paths.REPO, "tests")
    trees = {}
    for path in glob.glob(os.path.join(tests, "**", "*.py"), recursive=True):
        with open(path, encoding="utf-8") as f:
            trees[os.path.relpath(path, paths.REPO)] = ast.parse(f.read())
    session = {name for path, tree in trees.items() for name in session_fixtures_in(tree)}
    found = []
    for path, tree in trees.items():
        if not os.path.basename(path).startswith("test_"):
            continue
        found += [f"{path}: defines {n}" for n in session_fixtures_in(tree)]
        found += [f"{path}: imports {a.name}" for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests")
                  for a in node.names if a.name in session]
    assert found == [], "move the fixture to a conftest.py and use it by name, unimported"
