"""``node-agent validate``: a 5,000-file config (whole command and in process), and data-URL
throughput (a config carrying large base64 and percent-encoded ``data:`` URLs), each against the
floor ``json.loads`` of the same file (the bare cost of reading it).

Targets (issues 15 and 19): the 5,000-file validate within 2x of its time before the Ignition
parity work (docs/ignition-validation.md), and data URLs validated at 50 MB/s or more.
"""

import base64
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
from typing import List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import VENV_BIN, Row, interleaved, median, rows_of, run_quiet

GROUP_FILES = "validate 5,000-file config"
GROUP_DATA = "validate data URLs"
FLOOR = "json.loads of the config"
FILES = 5000


def many_files_config() -> dict:
    files = [{"path": f"/etc/bench/d{i % 50}/file-{i:04d}.conf", "mode": 0o644, "overwrite": True,
              "contents": {"source": "data:," + urllib.parse.quote(f"setting{i} = value\n")}}
             for i in range(FILES)]
    units = [{"name": f"bench-{i}.service", "enabled": True,
              "contents": f"[Unit]\nDescription=bench {i}\n[Service]\nExecStart=/bin/true\n[Install]\n"
                          "WantedBy=multi-user.target\n"} for i in range(100)]
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}, "systemd": {"units": units}}


def data_url_config(megabytes: int) -> dict:
    """Half the bytes as base64 data URLs, half percent-encoded, in 4 MiB files."""
    chunk = 4 << 20
    blob = bytes(range(256)) * (chunk // 256)
    files = []
    for i in range(max(2, megabytes // 4)):
        if i % 2 == 0:
            source = "data:;base64," + base64.b64encode(blob[: chunk * 3 // 4]).decode()
        else:
            source = "data:," + ("a%20b%2Fc" * (chunk // 9))
        files.append({"path": f"/var/bench/blob-{i}", "contents": {"source": source}})
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}


def run(quick: bool = False) -> List[Row]:
    from agent.core.loadconfig import check_node_config

    runs = 3 if quick else 7
    work = tempfile.mkdtemp(prefix="bench-validate-")
    try:
        many = os.path.join(work, "many.ign")
        with open(many, "w") as f:
            json.dump(many_files_config(), f)
        data = os.path.join(work, "data.ign")
        with open(data, "w") as f:
            json.dump(data_url_config(16 if quick else 64), f)
        size_mb = os.path.getsize(data) / 1e6

        def read(path: str) -> bytes:
            with open(path, "rb") as f:
                return f.read()

        def check(path: str) -> None:
            nc, problems = check_node_config(read(path), path)
            assert nc is not None, [str(p) for p in problems if p.is_error][:3]

        script = os.path.join(VENV_BIN, "node-agent")
        cli = [script] if os.access(script, os.X_OK) else [sys.executable, "-m", "agent"]
        if os.environ.get("BENCH_VALIDATE_CLI"):  # time another build's CLI (before/after figures)
            cli = os.environ["BENCH_VALIDATE_CLI"].split()
        files_cases = {
            FLOOR: lambda: json.loads(read(many)),
            "check_node_config (in process)": lambda: check(many),
            "node-agent validate (CLI)": lambda: run_quiet(cli + ["validate", many]),
        }
        data_cases = {
            FLOOR: lambda: json.loads(read(data)),
            "check_node_config (in process)": lambda: check(data),
        }
        files_samples = interleaved(files_cases, runs)
        data_samples = interleaved(data_cases, runs)
        cpu = []  # CPU seconds too: on a loaded machine wall time mostly measures the wait for a core
        for _ in range(runs):
            start = time.process_time()
            check(data)
            cpu.append(time.process_time() - start)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = f"{runs} runs, interleaved"
    rows = rows_of(GROUP_FILES, files_samples, FLOOR, {
        FLOOR: note, "check_node_config (in process)": note,
        "node-agent validate (CLI)": note + "; whole process: start-up, read, parse, validate"})
    xs = data_samples["check_node_config (in process)"]
    t = median(xs)
    rows += rows_of(GROUP_DATA, data_samples, FLOOR, {
        FLOOR: f"{note}; {size_mb:.0f} MB config",
        "check_node_config (in process)": f"{note}; {size_mb / t:.0f} MB/s of data URLs "
                                          f"({size_mb / max(xs):.0f}-{size_mb / min(xs):.0f}), "
                                          f"{size_mb / median(cpu):.0f} MB per CPU second (target >= 50 MB/s)"})
    rows[-1].extra.update(mb_per_s=size_mb / t, mb_per_cpu_s=size_mb / median(cpu))
    return rows


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
