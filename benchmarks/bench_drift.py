"""On-disk drift check (issue 32) of 10,000 files (10 MiB) against the floor: ``sha256sum`` of the
same files (coreutils: one process, stat and hash each, nothing compared).

Cases, interleaved: the full check the day-2 loop runs on start and before an update
(``agent.node.drift.check``: lstat, streamed SHA-256, compare with the config, every file), the
same with the expectation built first (the config's data URLs decoded and hashed: what a new
config costs once), and the check of one path an inotify event names. Page cache warm for all
(the warm-up round reads every file once), so the ratio compares the work, not the disk.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from typing import Dict, List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.bench_apply import contents, node_config, paths
from benchmarks.common import Row, interleaved, rows_of

FLOOR = "sha256sum of the files"
CHECK = "drift check (expectation built)"
BUILD_CHECK = "expectation + drift check"
ONE = "check of one changed path (inotify event)"


def measure(work: str, files: int, size: int, runs: int) -> Dict[str, List[float]]:
    from agent.host import inotify
    from agent.host.root import Root
    from agent.node import drift
    from agent.node.apply import apply_config

    datas = contents(files, size)
    cfg = node_config(datas)
    top = os.path.join(work, "root")
    os.mkdir(top)
    root = Root(top)
    apply_config(root, cfg)
    file_list = [p.lstrip("/") for p in paths(files)]
    expect = drift.build_expectation(root, cfg)
    assert drift.check(root, expect) == []  # meaningful only if it checks a clean root fully
    with open(os.path.join(top, file_list[7]), "ab") as f:
        f.write(b"x")
    assert [d.path for d in drift.check(root, expect)] == ["/" + file_list[7]]
    one = {"/" + file_list[7]}

    def floor() -> None:
        subprocess.run(["sha256sum", "--", *file_list], cwd=top, check=False, stdout=subprocess.DEVNULL)

    cases = {FLOOR: floor,
             CHECK: lambda: drift.check(root, expect),
             BUILD_CHECK: lambda: drift.check(root, drift.build_expectation(root, cfg)),
             ONE: lambda: drift.check(root, expect, only=one)}
    samples = interleaved(cases, runs)
    if inotify.available():
        watch = interleaved({"watch": lambda: inotify.DirWatcher(root, expect.watch_dirs()).close()}, runs)
        samples["inotify watches on every directory"] = watch["watch"]
    return samples


def run(quick: bool = False) -> List[Row]:
    runs = 3 if quick else 7
    work = tempfile.mkdtemp(prefix="bench-drift-")
    try:
        files, size = 10000, 10 << 20
        samples = measure(work, files, size, runs)
        note = f"{runs} runs, interleaved, page cache warm"
        return rows_of(f"drift check {files:,} files, {size >> 20} MiB", samples, FLOOR, {
            FLOOR: note + "; coreutils, one process",
            CHECK: note + "; lstat + streamed sha256 + compare, every file",
            BUILD_CHECK: note + "; data URLs decoded and hashed first (once per config)",
            ONE: note + "; what an inotify event costs",
            "inotify watches on every directory": f"{len(paths(files)) // 100} directories; set up once per config",
        })
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
