"""Apply into a scratch root against the floor: the same files extracted by ``tar -x`` and
flushed with ``sync`` on every file (one fsync each, no safety).

Two configs: 200 files of 1 MiB in all, and 10,000 files of 10 MiB in all (target: apply <= 1.5x the
floor). For each, ``apply_config`` into a fresh root (contents decoded, planned, journaled,
written atomically and durably, recorded) and the same with parsing and validation of the
Ignition JSON first (``load_node_config`` + ``apply_config``: what a node does with the bytes it
fetched); for 200 files also the re-apply with nothing to change.
"""

import base64
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import Dict, List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import Row, interleaved, rows_of

FLOOR = "tar -x + sync (each file)"
APPLY = "apply_config (fresh root)"
LOAD_APPLY = "parse + validate + apply_config (fresh root)"
AGAIN = "apply_config again (no change)"


def contents(files: int, size: int) -> List[bytes]:
    each = size // files
    return [(f"# file {i}\n".encode() + os.urandom(each // 2 + 1).hex().encode())[:each] for i in range(files)]


def paths(files: int) -> List[str]:
    dirs = max(10, files // 100)
    return [f"/etc/bench/d{i % dirs}/file-{i:05d}.conf" for i in range(files)]


def ignition(datas: List[bytes]) -> dict:
    files = [{"path": p, "mode": 0o644, "overwrite": True,
              "contents": {"source": "data:;base64," + base64.b64encode(d).decode()}}
             for p, d in zip(paths(len(datas)), datas)]
    return {"ignition": {"version": "3.4.0"}, "storage": {"files": files}}


def node_config(datas: List[bytes]):
    from agent.core.nodeconfig import NodeConfig

    return NodeConfig(ignition=ignition(datas), name=f"bench-{len(datas)}")


def tarball(datas: List[bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p, d in zip(paths(len(datas)), datas):
            info = tarfile.TarInfo(p.lstrip("/"))
            info.size, info.mode = len(d), 0o644
            tar.addfile(info, io.BytesIO(d))
    return buf.getvalue()


def measure(work: str, files: int, size: int, runs: int, again: bool) -> Dict[str, List[float]]:
    from agent.core.loadconfig import load_node_config
    from agent.host.root import Root
    from agent.node.apply import apply_config

    datas = contents(files, size)
    cfg = node_config(datas)
    raw = json.dumps(cfg.ignition).encode()
    tar_path = os.path.join(work, f"files-{files}.tar")
    with open(tar_path, "wb") as f:
        f.write(tarball(datas))
    file_list = [p.lstrip("/") for p in paths(files)]
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        top = os.path.join(work, f"root-{files}-{counter[0]}")
        os.mkdir(top)
        return top

    def drop(top: str) -> None:
        shutil.rmtree(top)  # after the timed part: keeps the scratch space (and page cache) small

    def floor() -> None:
        top = fresh()
        subprocess.run(["tar", "-xf", tar_path, "-C", top], check=True)
        subprocess.run(["sync"] + file_list, cwd=top, check=True)
        return top

    def apply_fresh() -> str:
        top = fresh()
        apply_config(Root(top), cfg)
        return top

    def load_apply_fresh() -> str:
        top = fresh()
        apply_config(Root(top), load_node_config(raw, "bench.ign"))
        return top

    cases = {FLOOR: floor, APPLY: apply_fresh, LOAD_APPLY: load_apply_fresh}
    done = apply_fresh()
    if again:
        cases[AGAIN] = lambda: apply_config(Root(done), cfg, previous=cfg)
    # the benchmark is only meaningful if apply really wrote what tar wrote
    with open(os.path.join(done, file_list[7]), "rb") as f:
        assert f.read() == datas[7]
    cleanup: List[str] = []

    def timed_then_dropped(fn):
        def run() -> None:
            top = fn()
            if isinstance(top, str) and top != done:
                cleanup.append(top)
        return run

    samples = interleaved({name: timed_then_dropped(fn) for name, fn in cases.items()}, runs)
    for top in cleanup + [done]:
        drop(top)
    return samples


def run(quick: bool = False) -> List[Row]:
    runs = 3 if quick else 9
    work = tempfile.mkdtemp(prefix="bench-apply-")
    rows: List[Row] = []
    try:
        for files, size, again in ((200, 1 << 20, True), (10000, 10 << 20, False)):
            runs_here = runs if files <= 200 else max(3, runs // 2)
            samples = measure(work, files, size, runs_here, again)
            note = f"{runs_here} runs, interleaved"
            rows += rows_of(f"apply {files:,} files, {size >> 20} MiB", samples, FLOOR, {
                FLOOR: note,
                APPLY: note + "; journaled, atomic writes, fsync" + ("; target <= 1.5x" if files > 200 else ""),
                LOAD_APPLY: note + "; the JSON bytes parsed and validated first",
                AGAIN: note + "; compares, writes nothing",
            })
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return rows


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
