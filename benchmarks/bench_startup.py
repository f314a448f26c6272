"""Agent start-up: ``node-agent --version`` and a no-op ``firstboot`` (already done) against the
interpreter's own start-up (``python -c pass``, the floor) and ``cloud-init --version`` (the
Python peer that runs on every boot of a cloud image). Medians of interleaved runs.

The development venv installs the project in editable mode, whose import finder runs at every
interpreter start; an RPM or ``pip install .`` has none. So the headline case is measured on a
normal install: a wheel built from a copy of the tree, installed (without dependencies:
``--version`` needs none) into a fresh venv, against that venv's ``python -c pass``.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from typing import List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, VENV_BIN, Row, interleaved, median, run_quiet

GROUP = "start-up"
FLOOR = "python -c pass"
FLOOR_INSTALLED = "python -c pass (fresh venv)"


def _node_agent() -> List[str]:
    script = os.path.join(VENV_BIN, "node-agent")
    return [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "agent"]


def scratch_done_root(top: str) -> str:
    """A node root whose first boot is already done: the stamp is all firstboot looks at."""
    state = os.path.join(top, "var/lib/node-agent")
    os.makedirs(state)
    with open(os.path.join(state, "firstboot.done"), "w") as f:
        f.write('{"config": "rendered-worker-bench", "at": "2024-01-01T00:00:00+00:00"}\n')
    return top


def import_time_agent_cli() -> float:
    """Cumulative import time of agent.cli (seconds), from ``python -X importtime``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "import agent.cli"], cwd=REPO,
                          capture_output=True, text=True, check=True)
    for line in proc.stderr.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) == 3 and parts[2] == "agent.cli":
            return int(parts[1]) / 1e6
    raise RuntimeError("agent.cli not in the -X importtime output")


def normal_install(top: str) -> str:
    """A fresh venv with the project installed from a wheel (not editable); its bin directory."""
    src = os.path.join(top, "src")
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", ".git", "build", "*.egg-info", "__pycache__"))
    wheels = os.path.join(top, "wheels")
    run_quiet([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, src])
    venv = os.path.join(top, "venv")
    run_quiet([sys.executable, "-m", "venv", venv])
    wheel = [os.path.join(wheels, n) for n in os.listdir(wheels) if n.endswith(".whl")]
    run_quiet([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", "--no-deps", *wheel])
    return os.path.join(venv, "bin")


def run(quick: bool = False) -> List[Row]:
    runs = 5 if quick else 21
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    agent = _node_agent()
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as top:
        root = scratch_done_root(os.path.join(top, "root"))
        installed = normal_install(top)
        cases = {
            FLOOR: lambda: run_quiet([sys.executable, "-c", "pass"], env),
            FLOOR_INSTALLED: lambda: run_quiet([os.path.join(installed, "python"), "-c", "pass"], env),
            "node-agent --version (normal install)": lambda: run_quiet([os.path.join(installed, "node-agent"),
                                                                        "--version"], env),
            "node-agent --version": lambda: run_quiet(agent + ["--version"], env),
            "node-agent firstboot (done, no-op)": lambda: run_quiet(agent + ["firstboot", "--root", root], env),
        }
        cloud_init = shutil.which("cloud-init")
        if cloud_init:
            cases["cloud-init --version"] = lambda: run_quiet([cloud_init, "--version"], env)
        samples = interleaved(cases, runs)
    def row(name: str, floor, note: str) -> Row:
        return Row(GROUP, name, median(samples[name]), floor=floor, is_floor=floor is None, note=note,
                   samples=list(samples[name]))

    rows = [row(FLOOR_INSTALLED, None, f"the venv of the normal install, {runs} runs"),
            row("node-agent --version (normal install)", FLOOR_INSTALLED,
                f"wheel in a fresh venv (target <= 2x), {runs} runs, interleaved"),
            row(FLOOR, None, f"{sys.executable} (dev venv), {runs} runs")]
    for name in ("node-agent --version", "node-agent firstboot (done, no-op)"):
        rows.append(row(name, FLOOR, f"editable dev install, {runs} runs, interleaved"))
    if cloud_init:
        rows.append(row("cloud-init --version", FLOOR, f"{cloud_init} (Debian), {runs} runs, interleaved"))
    else:
        rows.append(Row(GROUP, "cloud-init --version", None,
                        note="cloud-init not installed (make bench installs Debian's cloud-init)"))
    imports = [import_time_agent_cli() for _ in range(5)]
    rows.append(Row(GROUP, "import agent.cli (-X importtime, cumulative)", median(imports),
                    note="5 runs; what `--version` loads beyond the interpreter", samples=imports))
    return rows


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
