"""Container images made without a registry or a container engine: docker-archive tarballs (the
format of ``docker save``), which ``ctr images import`` and ``podman load`` read. Used by the VM
test's guest (its pause and busybox images: no registry is reachable from it) and by ``make image``
(the server's image, tools/image/build-image.sh). Standard library only: both run it with the
host's python3.

    image_archive.py OUT.tar TAG --file SRC=/DEST [--link /DEST=TARGET] [--entrypoint /pause]
        one layer of the given files (the VM guest's images)
    image_archive.py layer DIR OUT.tar [--mtime SECONDS]
        one layer of a directory tree (the server image's base; its wheel)
    image_archive.py wheel WHEEL DIR --site /usr/local/lib/python3.X/dist-packages --script NAME
        unpacks a pure-Python wheel under DIR as pip would install it, with NAME's console script
    image_archive.py image OUT.tar TAG --layer A.tar [--layer B.tar] [--entrypoint X] [--user UID:GID] ...
        an image of those layer tarballs, lowest first

The same input gives the same bytes (and the same image ID): entries sorted by path, fixed times in
the config, and in the layers unless the tree's own times are kept (the base layer keeps them:
Debian's compiled bytecode checks its source's mtime).
"""

import argparse
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import zipfile
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

MTIME = 0  # 1970-01-01: the layer's bytes depend only on the files
CREATED = "1970-01-01T00:00:00Z"
PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
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


def layer_from_dir(root: str, out: str, mtime: Optional[int] = None) -> None:
    """A layer of the tree under ``root`` (the tree's top is the image's /), written to ``out``:
    files, directories, symlinks and hard links with their modes and numeric owners, sorted by path
    (tarfile.add sorts each directory). Device nodes, sockets and FIFOs are left out: the runtime
    makes /dev. ``mtime``: every entry's time (None keeps the tree's own)."""
    def keep(info: tarfile.TarInfo) -> Optional[tarfile.TarInfo]:
        if not (info.isfile() or info.isdir() or info.issym() or info.islnk()):
            return None
        info.uname = info.gname = ""
        if mtime is not None:
            info.mtime = mtime
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(os.listdir(root)):
            tar.add(os.path.join(root, name), arcname=name, filter=keep)


def image_config(diff_ids: Sequence[str], entrypoint: Sequence[str] = (), cmd: Sequence[str] = (),
                 user: str = "", env: Sequence[str] = (PATH,), labels: Optional[Dict[str, str]] = None,
                 history: Sequence[str] = ()) -> bytes:
    """The image config (OCI image spec's config, as Docker writes it): the layers' diff IDs (the
    sha256 of each uncompressed layer), lowest first."""
    run: Dict[str, object] = {"Entrypoint": list(entrypoint) or None, "Cmd": list(cmd) or None,
                              "Env": list(env), "WorkingDir": "/"}
    if user:
        run["User"] = user
    if labels:
        run["Labels"] = dict(labels)
    created_by = list(history) or ["tools/image_archive.py"] * len(diff_ids)
    config = {"architecture": "amd64", "os": "linux", "created": CREATED, "config": run,
              "rootfs": {"type": "layers", "diff_ids": list(diff_ids)},
              "history": [{"created": CREATED, "created_by": by} for by in created_by]}
    return json.dumps(config, sort_keys=True, separators=(",", ":")).encode()


def _check_tag(tag: str) -> Tuple[str, str]:
    if ":" not in tag.rsplit("/", 1)[-1]:
        raise ValueError(f"image tag {tag!r} has no ':version'; give e.g. localhost/pause:3.4")
    repo, version = tag.rsplit(":", 1)
    return repo, version


def _write(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    tar.addfile(_info(name, tarfile.REGTYPE, 0o644, len(data)), io.BytesIO(data))


def _archive(out, tag: str, layers: Sequence[Tuple[str, int, Iterable[bytes]]], config: bytes) -> None:
    """``docker save``'s layout into the open binary file ``out``: ``<layer sha>/layer.tar`` per
    layer (``layers``: sha256 hex, size, the bytes in chunks), ``<config sha>.json``,
    ``manifest.json`` and ``repositories``."""
    repo, version = _check_tag(tag)
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    names = [f"{sha}/layer.tar" for sha, _, _ in layers]
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for (sha, size, chunks), name in zip(layers, names):
            tar.addfile(_info(sha, tarfile.DIRTYPE, 0o755))
            tar.addfile(_info(name, tarfile.REGTYPE, 0o644, size), _Chunks(chunks))
        _write(tar, config_name, config)
        _write(tar, "manifest.json", json.dumps([{"Config": config_name, "RepoTags": [tag],
                                                   "Layers": names}]).encode())
        _write(tar, "repositories", json.dumps({repo: {version: layers[-1][0]}}).encode())


class _Chunks(io.RawIOBase):
    """A file-like reader over an iterable of byte chunks (tarfile copies from ``read``)."""

    def __init__(self, chunks: Iterable[bytes]):
        self._chunks, self._buf = iter(chunks), b""

    def read(self, size: int = -1) -> bytes:
        while size < 0 or len(self._buf) < size:
            chunk = next(self._chunks, None)
            if chunk is None:
                break
            self._buf += chunk
        data, self._buf = (self._buf, b"") if size < 0 else (self._buf[:size], self._buf[size:])
        return data


def docker_archive(tag: str, files: Sequence[LayerFile], links: Sequence[LayerLink] = (),
                   entrypoint: Sequence[str] = (), cmd: Sequence[str] = ()) -> bytes:
    """The whole tarball of one layer made of ``files`` and ``links`` (the VM guest's images)."""
    _check_tag(tag)
    layer = layer_tar(files, links)
    sha = hashlib.sha256(layer).hexdigest()
    config = image_config(["sha256:" + sha], entrypoint, cmd)
    out = io.BytesIO()
    _archive(out, tag, [(sha, len(layer), [layer])], config)
    return out.getvalue()


def _file_chunks(path: str, size: int = 1 << 20) -> Iterable[bytes]:
    with open(path, "rb") as f:
        yield from iter(lambda: f.read(size), b"")


def write_image(out: str, tag: str, layers: Sequence[str], config_args: dict) -> str:
    """Writes the image of the layer tarballs ``layers`` (paths, lowest first) to ``out``, streaming
    them (a base layer is a hundred megabytes or more); returns the image ID (the config's sha256)."""
    _check_tag(tag)
    sums = []
    for path in layers:
        digest = hashlib.sha256()
        for chunk in _file_chunks(path):
            digest.update(chunk)
        sums.append((digest.hexdigest(), os.path.getsize(path), path))
    config = image_config(["sha256:" + sha for sha, _, _ in sums], **config_args)
    with open(out, "wb") as f:
        _archive(f, tag, [(sha, size, _file_chunks(path)) for sha, size, path in sums], config)
    return "sha256:" + hashlib.sha256(config).hexdigest()


def console_script(entry: str) -> bytes:
    """The console script pip writes for ``module:function`` (setuptools' entry point syntax)."""
    module, _, func = entry.partition(":")
    if not module or not func.replace(".", "").isidentifier():
        raise ValueError(f"entry point {entry!r} is not module:function")
    return (f"#!/usr/bin/python3\nimport sys\nfrom {module} import {func.split('.')[0]}\n"
            f"if __name__ == \"__main__\":\n    sys.exit({func}())\n").encode()


def wheel_files(wheel: bytes, site: str, scripts: Sequence[str], bindir: str = "/usr/local/bin") -> List[LayerFile]:
    """What installing the pure-Python ``wheel`` (its bytes) puts in an image: its files under
    ``site``, and for each name in ``scripts`` (a console script of its entry_points.txt) an
    executable in ``bindir``. Only pure wheels: a platform wheel's files would need the image's ABI."""
    with zipfile.ZipFile(io.BytesIO(wheel)) as zf:
        names = zf.namelist()
        info = next((n for n in names if n.count("/") == 1 and n.endswith(".dist-info/WHEEL")), None)
        if info is None:
            raise ValueError("not a wheel: no *.dist-info/WHEEL")
        if b"Root-Is-Purelib: true" not in zf.read(info):
            raise ValueError(f"{info} says the wheel is not pure Python (Root-Is-Purelib); build a pure one")
        dist_info = info.split("/")[0]
        files = [(f"{site}/{n}", zf.read(n), 0o644) for n in names if not n.endswith("/")]
        found = _console_scripts(zf.read(f"{dist_info}/entry_points.txt").decode()
                                 if f"{dist_info}/entry_points.txt" in names else "")
    files.append((f"{site}/{dist_info}/INSTALLER", b"tools/image_archive.py\n", 0o644))
    for name in scripts:
        if name not in found:
            raise ValueError(f"the wheel has no console script {name!r} (it has: {', '.join(sorted(found)) or 'none'})")
        files.append((f"{bindir}/{name}", console_script(found[name]), 0o755))
    return files


def _console_scripts(text: str) -> Dict[str, str]:
    found, section = {}, ""
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "console_scripts" and "=" in line:
            name, _, entry = line.partition("=")
            found[name.strip()] = entry.strip()
    return found


def unpack(files: Sequence[LayerFile], root: str) -> None:
    """Writes ``files`` under the directory ``root`` (the image's /)."""
    for path, content, mode in files:
        dest = os.path.join(root, path.strip("/"))
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        with open(dest, "wb") as f:
            f.write(content)
        os.chmod(dest, mode)


def _pair(text: str) -> Tuple[str, str]:
    left, sep, right = text.partition("=")
    if not sep or not left or not right:
        raise argparse.ArgumentTypeError(f"{text!r} is not LEFT=RIGHT")
    return left, right


def _files_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(description="one layer of the given files")
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


def _layer_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="image_archive.py layer", description="one layer of a directory tree")
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--mtime", type=int, default=None, help="every entry's time (default: the tree's own)")
    args = ap.parse_args(argv)
    layer_from_dir(args.root, args.out, args.mtime)
    return 0


def _wheel_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="image_archive.py wheel", description="unpack a pure wheel under DIR")
    ap.add_argument("wheel")
    ap.add_argument("root")
    ap.add_argument("--site", required=True, help="the image's site directory, e.g. /usr/local/lib/python3.13/dist-packages")
    ap.add_argument("--script", action="append", default=[], help="a console script to install in /usr/local/bin")
    args = ap.parse_args(argv)
    with open(args.wheel, "rb") as f:
        unpack(wheel_files(f.read(), args.site, args.script), args.root)
    return 0


def _image_main(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="image_archive.py image", description="an image of layer tarballs")
    ap.add_argument("out")
    ap.add_argument("tag")
    ap.add_argument("--layer", action="append", required=True, help="a layer tarball, lowest first")
    ap.add_argument("--history", action="append", default=[], help="what made each layer, in order")
    ap.add_argument("--entrypoint", action="append", default=[])
    ap.add_argument("--cmd", action="append", default=[])
    ap.add_argument("--user", default="", help="UID[:GID], numeric so that runAsNonRoot can check it")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE (PATH is always set)")
    ap.add_argument("--label", type=_pair, action="append", default=[])
    args = ap.parse_args(argv)
    if args.history and len(args.history) != len(args.layer):
        ap.error(f"{len(args.history)} --history for {len(args.layer)} --layer: give one per layer or none")
    tmp = args.out + ".tmp"
    image_id = write_image(tmp, args.tag, args.layer, {
        "entrypoint": args.entrypoint, "cmd": args.cmd, "user": args.user,
        "env": [PATH] + [e for e in args.env if not e.startswith("PATH=")],
        "labels": dict(args.label), "history": args.history})
    shutil.move(tmp, args.out)
    print(image_id)
    return 0


def main(argv: Sequence[str]) -> int:
    modes = {"layer": _layer_main, "wheel": _wheel_main, "image": _image_main}
    if argv and argv[0] in modes:
        return modes[argv[0]](argv[1:])
    return _files_main(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
