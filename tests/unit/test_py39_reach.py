"""tools/py39_reach.py chooses the test modules of the RHEL 9 run (issue 54): the cover it computes,
the times it reads, and the choice kept in tests/py39_selection.json, which tests/conftest.py reads."""

import json
import os

from tests.conftest import PY39_SELECTION, reached_elsewhere
from tests.helpers.paths import REPO
from tools.py39_reach import MARKS, cover, functions, seconds


def test_the_cover_reaches_every_line_and_takes_a_module_only_for_a_line_no_cheaper_module_reaches():
    by_module = {
        "tests/a.py": {("x.py", 1), ("x.py", 2), ("x.py", 3)},  # costly, and all of it reached by b and c
        "tests/b.py": {("x.py", 1), ("x.py", 2)},
        "tests/c.py": {("x.py", 3), ("y.py", 1)},
        "tests/d.py": {("x.py", 1)},  # nothing of its own
        "tests/e.py": {("z.py", 9)},  # the only one to reach z.py:9, however costly
    }
    cost = {"tests/a.py": 100.0, "tests/b.py": 1.0, "tests/c.py": 1.0, "tests/d.py": 0.1, "tests/e.py": 500.0}
    chosen = cover(by_module, cost)
    assert set().union(*(by_module[m] for m in chosen)) == set().union(*by_module.values())
    assert sorted(chosen) == ["tests/b.py", "tests/c.py", "tests/e.py"]


def test_a_line_counts_to_the_innermost_function_whose_body_holds_it_and_a_def_line_to_none():
    source = ("import os\n"               # 1
              "def outer():\n"            # 2
              "    x = 1\n"               # 3
              "    def inner():\n"        # 4
              "        return x\n"        # 5
              "    return inner\n"        # 6
              "class C:\n"                # 7
              "    async def m(self):\n"  # 8
              "        pass\n")           # 9
    called = functions({("a.py", 1), ("a.py", 2), ("a.py", 5), ("a.py", 8), ("a.py", 9)}, read=lambda rel: source)
    assert called == {"a.py:inner:4", "a.py:m:8"}
    assert functions({("a.py", 3)}, read=lambda rel: source) == {"a.py:outer:2"}


def test_a_modules_seconds_are_the_sum_of_its_tests_whatever_their_class(tmp_path):
    (tmp_path / "junit.xml").write_text(
        '<testsuites><testsuite>'
        '<testcase classname="tests.unit.test_py39_reach" name="t1" time="1.5"/>'
        '<testcase classname="tests.unit.test_py39_reach.TestSome" name="t2" time="2.0"/>'
        '<testcase classname="tests.unit.test_readme" name="t3" time="0.25"/>'
        '</testsuite></testsuites>')
    assert seconds(str(tmp_path)) == {"tests/unit/test_py39_reach.py": 3.5, "tests/unit/test_readme.py": 0.25}


def test_every_module_the_choice_names_exists_so_a_moved_chosen_module_asks_for_a_new_choice():
    """A module chosen for lines only it reached, renamed or deleted, would leave those lines
    unreached on Python 3.9 without a word: the choice must be made again (tools/py39_reach.py)."""
    with open(PY39_SELECTION, encoding="utf-8") as f:
        modules = json.load(f)["modules"]
    assert modules
    missing = [m for m in modules if not os.path.exists(os.path.join(REPO, m))]
    assert not missing, f"{missing}: make the choice again (tools/py39_reach.py measure, then choose)"


def test_conftest_marks_only_the_modules_the_choice_did_not_take(tmp_path):
    path = tmp_path / "selection.json"
    path.write_text(json.dumps({"modules": {"tests/unit/test_a.py": {"run": True},
                                            "tests/kube/test_b.py": {"run": False}}}))
    assert reached_elsewhere(str(path)) == {"kube/test_b.py"}


def test_make_py39_deselects_what_the_measured_run_left_out_and_the_modules_the_choice_did_not_take():
    """The choice holds for the run it measured: make py39's markers are the measured run's, and
    ``reached`` besides."""
    with open(os.path.join(REPO, "Makefile"), encoding="utf-8") as f:
        makefile = f.read()
    assert f'-m "{MARKS} and not reached"' in makefile
