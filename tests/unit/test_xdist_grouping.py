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
