"""Container images made without a registry, for the VM test's guest (no registry is reachable
from it): a docker-archive tarball (the format of ``docker save``, which ``ctr images import``
reads) holding one uncompressed layer, the image config and ``manifest.json``.

    python3 image_archive.py OUT.tar TAG --file SRC=/DEST [--link /DEST=TARGET] [--entrypoint /pause]

The layer's entries are root-owned with a fixed mtime, so the same input gives the same bytes
(and the same image ID). Standard library only: build-image.sh runs it with the host's python3.
"""

import argparse
import hashlib
import io
import json
import sys
import tarfile
from typing import Dict, List, Sequence, Tuple

MTIME = 0  # 1970-01-01: the layer's bytes depend only on the files
LayerFile = Tuple[str, bytes, int]  # (path in the image, content, mode)
LayerLink = Tuple[str, str]  # (path in the image, symlink target)


def _parents(path: str) -> List[str]:
    parts = path.strip("/").split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def _info(name: str, kind: bytes, mode: int, size: int = 0) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.mtime = kind, mode, size, MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def layer_tar(files: Sequence[LayerFile], links: Sequence[LayerLink] = ()) -> bytes:
    """An uncompressed tar of ``files`` and ``links`` with their parent directories, sorted by path."""
    dirs = sorted({d for path, *_ in [*files, *links] for d in _parents(path)})
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in dirs:
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o755))
        entries = [(p.strip("/"), c, m, None) for p, c, m in files] + [(p.strip("/"), b"", 0o777, t) for p, t in links]
        for path, content, mode, target in sorted(entries, key=lambda e: e[0]):
            if target is None:
                tar.addfile(_info(path, tarfile.REGTYPE, mode, len(content)), io.BytesIO(content))
            else:
                info = _info(path, tarfile.SYMTYPE, mode)
                info.linkname = target
                tar.addfile(info)
    return out.getvalue()


def image_config(layer: bytes, entrypoint: Sequence[str], cmd: Sequence[str]) -> bytes:
    """The image config (OCI image spec's config, as Docker writes it): one layer, its diff ID."""
    config = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
              "config": {"Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None,
                         "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
                         "WorkingDir": "/"},
              "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
              "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "tests/vm/image_archive.py"}]}
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def docker_archive(tag: str, files: Sequence[LayerFile], links: Sequence[LayerLink] = (),
                   entrypoint: Sequence[str] = (), cmd: Sequence[str] = ()) -> bytes:
    """The whole tarball: ``<layer sha>/layer.tar``, ``<config sha>.json``, ``manifest.json`` and
    ``repositories`` (what ``docker save`` writes for one tagged image)."""
    if ":" not in tag.rsplit("/", 1)[-1]:
        raise ValueError(f"image tag {tag!r} has no ':version'; give e.g. localhost/pause:3.4")
    layer = layer_tar(files, links)
    layer_id = hashlib.sha256(layer).hexdigest()
    config = image_config(layer, entrypoint, cmd)
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    repo, version = tag.rsplit(":", 1)
    members: Dict[str, bytes] = {
        f"{layer_id}/layer.tar": layer,
        config_name: config,
        "manifest.json": json.dumps([{"Config": config_name, "RepoTags": [tag],
                                      "Layers": [f"{layer_id}/layer.tar"]}]).encode(),
        "repositories": json.dumps({repo: {version: layer_id}}).encode(),
    }
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(layer_id, tarfile.DIRTYPE, 0o755))
        for name, data in members.items():
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))
    return out.getvalue()


def _pair(text: str) -> Tuple[str, str]:
    left, sep, right = text.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"{text!r} is not LEFT=RIGHT")
    return left, right


def main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("tag")
    ap.add_argument("--file", type=_pair, action="append", default=[], help="SRC=/DEST (an executable, mode 0755)")
    ap.add_argument("--link", type=_pair, action="append", default=[], help="/DEST=TARGET (a symlink)")
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    args = ap.parse_args(argv)
    files = []
    for src, dest in args.file:
        with open(src, "rb") as f:
            files.append((dest, f.read(), 0o755))
    data = docker_archive(args.tag, files, args.link, args.entrypoint, args.cmd)
    with open(args.out, "wb") as f:
        f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
