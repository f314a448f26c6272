"""Apply of a 1 MB, 200-file config into a scratch root (``agent.apply.apply_config``: contents
decoded, planned, journaled, written atomically with fsync, recorded) against the floor: the
same files extracted by ``tar`` and flushed to disk with ``sync`` on every file.
"""

import base64
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from typing import List

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import Row, interleaved, median

GROUP = "apply 200 files, 1 MB"
FLOOR = "tar -x + sync (each file)"
FILES = 200
SIZE = 1 << 20


def contents() -> List[bytes]:
    each = SIZE // FILES
    return [(f"# file {i}\n".encode() + os.urandom(each // 2).hex().encode())[:each] for i in range(FILES)]


def paths() -> List[str]:
    return [f"/etc/bench/d{i % 10}/file-{i:03d}.conf" for i in range(FILES)]


def node_config(datas: List[bytes]):
    from agent.nodeconfig import NodeConfig

    files = [{"path": p, "mode": 0o644, "overwrite": True,
              "contents": {"source": "data:;base64," + base64.b64encode(d).decode()}}
             for p, d in zip(paths(), datas)]
    return NodeConfig(ignition={"ignition": {"version": "3.4.0"}, "storage": {"files": files}}, name="bench-1mb")


def tarball(datas: List[bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for p, d in zip(paths(), datas):
            info = tarfile.TarInfo(p.lstrip("/"))
            info.size, info.mode = len(d), 0o644
            tar.addfile(info, io.BytesIO(d))
    return buf.getvalue()


def run(quick: bool = False) -> List[Row]:
    from agent.apply import apply_config
    from agent.host.root import Root

    runs = 3 if quick else 9
    datas = contents()
    cfg = node_config(datas)
    work = tempfile.mkdtemp(prefix="bench-apply-")
    tar_path = os.path.join(work, "files.tar")
    with open(tar_path, "wb") as f:
        f.write(tarball(datas))
    file_list = [p.lstrip("/") for p in paths()]
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        top = os.path.join(work, f"root-{counter[0]}")
        os.mkdir(top)
        return top

    def floor() -> None:
        top = fresh()
        subprocess.run(["tar", "-xf", tar_path, "-C", top], check=True)
        subprocess.run(["sync"] + file_list, cwd=top, check=True)

    def apply_fresh() -> None:
        apply_config(Root(fresh()), cfg)

    done = fresh()
    apply_config(Root(done), cfg)

    def apply_again() -> None:
        apply_config(Root(done), cfg, previous=cfg)

    try:
        samples = interleaved({FLOOR: floor, "apply_config (fresh root)": apply_fresh,
                               "apply_config again (no change)": apply_again}, runs)
        # the benchmark is only meaningful if apply really wrote what tar wrote
        with open(os.path.join(done, file_list[7]), "rb") as f:
            assert f.read() == datas[7]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    note = f"{runs} runs, interleaved"
    return [
        Row(GROUP, FLOOR, median(samples[FLOOR]), is_floor=True, note=note),
        Row(GROUP, "apply_config (fresh root)", median(samples["apply_config (fresh root)"]), floor=FLOOR,
            note=note + "; journaled, atomic writes, fsync"),
        Row(GROUP, "apply_config again (no change)", median(samples["apply_config again (no change)"]),
            floor=FLOOR, note=note + "; compares, writes nothing"),
    ]


if __name__ == "__main__":
    from benchmarks.common import table

    print(table(run(quick="--quick" in sys.argv)))
