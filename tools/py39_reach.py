"""Which test modules the RHEL 9 run (`make py39`) needs to call every function of the shipped code
that the whole RHEL 9 run calls (issue 54).

    .venv39/bin/python tools/py39_reach.py measure build/reach-all    # the whole RHEL 9 run, measured
    .venv39/bin/python tools/py39_reach.py choose build/reach-all     # writes tests/py39_selection.json
    .venv39/bin/python tools/py39_reach.py measure build/reach-chosen --chosen
    .venv39/bin/python tools/py39_reach.py compare build/reach-all build/reach-chosen

(.venv39's Python: it has coverage, from the test extra, and is the Python measured.)

``measure`` runs the RHEL 9 run's pytest command in ``.venv39`` under coverage.py: every Python
process of the run (pytest's workers, each server, each node-agent and CLI run) records the lines
of ``agent/`` it runs, labelled with the test module it works for (tools/py39_reach_hook.py), and
the test modules' times are kept (JUnit XML). A function counts as called where a line of its body
ran (its ``def`` runs at import). ``choose`` picks test modules, the cheapest per new function
first (greedy weighted set cover), until every function the run called is called, and writes the
choice: tests/conftest.py marks the other modules ``reached``, which `make py39` deselects. A
module the file does not name (a new one) runs. ``compare`` lists the functions (and counts the
lines) one run reached and the other did not.

Why functions and not lines: most test modules run a few lines no other module runs (an error
branch, a retry taken on a busy machine), so covering every line took 138 of 177 modules, 91 % of
the run's time (2026-11-30); every function, 77 modules and 55 %.

The suite on the newest libraries (`make suite`) still runs every test.
"""

import argparse
import ast
import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import Counter
from typing import Dict, List, Set, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV39 = os.path.join(ROOT, ".venv39")
SELECTION = os.path.join(ROOT, "tests", "py39_selection.json")
MARKS = "not vm and not cel and not image and not once"
HOOK = os.path.join(ROOT, "tools", "py39_reach_hook.py")
Line = Tuple[str, int]
Function = str  # "agent/x.py:name:line of its def"


def site_packages() -> str:
    out = subprocess.run([os.path.join(VENV39, "bin", "python"), "-c",
                          "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip()


def coveragerc(out: str) -> str:
    path = os.path.join(out, "coveragerc")
    with open(path, "w") as f:
        f.write("[run]\n"
                f"source = {os.path.join(ROOT, 'agent')}\n"
                f"data_file = {os.path.join(out, 'data', 'cov')}\n"
                "parallel = true\n"
                "concurrency = thread,gevent\n"
                "sigterm = true\n"
                "disable_warnings = no-data-collected, module-not-imported, module-not-measured, "
                "already-imported, couldnt-parse, no-ctracer\n")
    return path


def measure(out: str, chosen: bool, extra: List[str]) -> int:
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(os.path.join(out, "data"))
    rc = coveragerc(out)
    site = site_packages()
    installed = [os.path.join(site, n) for n in ("node_agent_reach_hook.py", "node_agent_reach_plugin.py",
                                                  "node_agent_reach.pth")]
    shutil.copy(HOOK, installed[0])
    shutil.copy(HOOK, installed[1])
    with open(installed[2], "w") as f:
        f.write("import node_agent_reach_hook\n")
    env = dict(os.environ, COVERAGE_PROCESS_START=rc, NODE_AGENT_REACH_ROOT=ROOT, NODE_AGENT_NO_SKIP="1",
               PYTEST_PLUGINS="node_agent_reach_plugin", PYTHONDONTWRITEBYTECODE="")
    marks = MARKS + (" and not reached" if chosen else "")
    cmd = [os.path.join(VENV39, "bin", "pytest"), "-q", "-p", "no:cacheprovider", "-m", marks, "-n", "3",
           "--dist", "loadgroup", "--junitxml", os.path.join(out, "junit.xml"), *extra]
    started = time.monotonic()
    try:
        code = subprocess.call(cmd, cwd=ROOT, env=env)
    finally:
        for path in installed:
            os.unlink(path)
    print(f"pytest exited {code} after {time.monotonic() - started:.0f} s; combining", flush=True)
    subprocess.run([os.path.join(VENV39, "bin", "python"), "-m", "coverage", "combine", "--quiet", "--rcfile", rc],
                   check=True, cwd=out)
    return code


def reached(out: str) -> Dict[str, Set[Line]]:
    """test module -> the lines of agent/ its processes ran."""
    from coverage import CoverageData  # the tool's own Python needs coverage: run it with .venv39/bin/python
    data = CoverageData(os.path.join(out, "data", "cov"))
    data.read()
    by_module: Dict[str, Set[Line]] = {}
    for filename in data.measured_files():
        rel = os.path.relpath(filename, ROOT)
        for line, labels in data.contexts_by_lineno(filename).items():
            for label in labels:
                by_module.setdefault(label or "(none)", set()).add((rel, line))
    return by_module


def function_spans(source: str, rel: str) -> List[Tuple[int, int, Function]]:
    """(first body line, last line, name) of each function in ``source``, innermost first."""
    spans = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            spans.append((node.body[0].lineno, node.end_lineno or node.body[-1].lineno,
                          f"{rel}:{node.name}:{node.lineno}"))
    return sorted(spans, key=lambda s: s[1] - s[0])


def functions(lines: Set[Line], read=lambda rel: open(os.path.join(ROOT, rel), encoding="utf-8").read()) -> Set[Function]:
    """The functions whose body ``lines`` ran in (a line outside every function counts to none)."""
    spans: Dict[str, List[Tuple[int, int, Function]]] = {}
    out = set()
    for rel, line in lines:
        if rel not in spans:
            spans[rel] = function_spans(read(rel), rel)
        for first, last, name in spans[rel]:
            if first <= line <= last:
                out.add(name)
                break
    return out


def seconds(out: str) -> Dict[str, float]:
    """test module -> its tests' time in the run (setup, call and teardown: its fixtures too)."""
    took: Dict[str, float] = {}
    for case in ET.parse(os.path.join(out, "junit.xml")).iter("testcase"):
        parts = case.get("classname", "").split(".")
        for n in range(len(parts), 0, -1):
            path = "/".join(parts[:n]) + ".py"
            if os.path.exists(os.path.join(ROOT, path)):
                took[path] = took.get(path, 0.0) + float(case.get("time") or 0)
                break
    return took


def cover(by_module: Dict[str, Set], cost: Dict[str, float]) -> List[str]:
    """Greedy weighted set cover of what ``by_module`` reaches (functions, or lines): the module
    with the most new items per second first, until no module adds one; then, the costliest
    first, a module whose every item the others chosen reach is let go (a cheap module taken early
    for one item a later one also reaches)."""
    left = set().union(*by_module.values()) if by_module else set()
    chosen: List[str] = []
    while left:
        best = max(by_module, key=lambda m: (len(by_module[m] & left) / max(cost.get(m, 0.0), 0.05), m))
        new = by_module[best] & left
        if not new:
            break
        chosen.append(best)
        left -= new
    reaching = Counter(item for m in chosen for item in by_module[m])
    for module in sorted(chosen, key=lambda m: (-cost.get(m, 0.0), m)):
        if all(reaching[item] > 1 for item in by_module[module]):
            chosen.remove(module)
            reaching.subtract(by_module[module])
    return chosen


def choose(out: str) -> None:
    by_module = {m: functions(lines) for m, lines in reached(out).items() if m.startswith("tests/")}
    cost = seconds(out)
    picked = cover(by_module, cost)
    every = set().union(*by_module.values())
    reaching = Counter(name for m in picked for name in by_module[m])
    modules = {}
    for m in sorted(set(by_module) | set(cost)):
        only = sum(1 for name in by_module.get(m, ()) if reaching[name] == 1) if m in picked else 0
        modules[m] = {"run": m in picked, "seconds": round(cost.get(m, 0.0), 1),
                      "functions": len(by_module.get(m, set())), "only_it": only}
    doc = {"what": "tools/py39_reach.py choose: the test modules make py39 runs (run: true) call every function "
                   "of agent/ that the whole RHEL 9 run called; tests/conftest.py marks the others 'reached'",
           "functions": len(every), "seconds_all": round(sum(cost.values()), 1),
           "seconds_chosen": round(sum(cost.get(m, 0.0) for m in picked), 1), "modules": modules}
    with open(SELECTION, "w") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{len(picked)} of {len(modules)} modules call all {len(every)} functions: "
          f"{doc['seconds_chosen']:.0f} of {doc['seconds_all']:.0f} test-seconds")


def compare(a: str, b: str) -> int:
    """The functions ``a``'s run called and ``b``'s did not (listed), and the lines (counted)."""
    first, second = (set().union(*reached(out).values()) for out in (a, b))
    called = functions(first), functions(second)
    missing = sorted(called[0] - called[1])
    print(f"{a}: {len(called[0])} functions, {len(first)} lines; {b}: {len(called[1])} functions, "
          f"{len(second)} lines; called in the first only: {len(missing)} functions ({len(first - second)} lines)")
    for name in missing:
        print(f"  {name}")
    return 1 if missing else 0


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="verb", required=True)
    m = sub.add_parser("measure")
    m.add_argument("out")
    m.add_argument("--chosen", action="store_true", help="only the modules tests/py39_selection.json chose")
    m.add_argument("pytest_args", nargs="*")
    sub.add_parser("choose").add_argument("out")
    c = sub.add_parser("compare")
    c.add_argument("first")
    c.add_argument("second")
    args = p.parse_args(argv)
    if args.verb == "measure":
        return measure(os.path.abspath(args.out), args.chosen, args.pytest_args)
    if args.verb == "choose":
        choose(os.path.abspath(args.out))
        return 0
    return compare(os.path.abspath(args.first), os.path.abspath(args.second))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
