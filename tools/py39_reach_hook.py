"""Installed for one run by tools/py39_reach.py into the venv's site-packages twice: as
``node_agent_reach_hook``, which a .pth imports at every interpreter's start, it starts coverage in
every Python process of the run, labelled with the test module that process works for; as
``node_agent_reach_plugin`` it is the pytest plugin that sets that label (``PYTEST_PLUGINS``). A process started during a test module's tests or fixtures inherits
the module's label through the environment, so a server a module fixture starts counts to the
module, whatever test it serves. Does nothing unless ``COVERAGE_PROCESS_START`` is set.
"""

import os

LABEL = "NODE_AGENT_REACH_MODULE"


def _start() -> None:
    if not os.environ.get("COVERAGE_PROCESS_START"):
        return
    try:
        import coverage
    except ImportError:  # a Python of the run without coverage: it counts to nothing
        return
    cov = coverage.process_startup()
    if cov is not None:
        cov.switch_context(os.environ.get(LABEL, "(none)"))


def _label(path) -> None:
    root = os.environ.get("NODE_AGENT_REACH_ROOT", os.getcwd())
    name = os.path.relpath(str(path), root).replace(os.sep, "/")
    os.environ[LABEL] = name
    import coverage
    cov = coverage.Coverage.current()
    if cov is not None:
        cov.switch_context(name)


if __name__ == "node_agent_reach_plugin":
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(collector):
        if isinstance(collector, pytest.Module):  # what a test module reaches as it is imported
            _label(collector.path)
        yield

    @pytest.hookimpl(tryfirst=True)  # before the test's fixtures, module fixtures included
    def pytest_runtest_setup(item):
        _label(item.path)

if __name__ == "node_agent_reach_hook":
    _start()
