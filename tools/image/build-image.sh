#!/usr/bin/env bash
# make image: node-config-server's container image, built from Debian's archive without a
# registry or a container engine, written as a docker-archive tarball (docker save's format: both
# `podman load -i` and `ctr images import` read it). Two layers:
#   1. the base (tools/image/build-base.sh: Debian trixie minbase, the server's dependencies as
#      Debian packages, user node-config-server 1001:1001), cached in CACHE_DIR;
#   2. the project's wheel (built by setuptools' PEP 517 backend from Debian's python3-setuptools and
#      python3-wheel, no pip and no index, from the files git tracks, as build-rpm.sh packs them) unpacked into /usr/local/lib/python3.X/dist-packages, its bytecode compiled by the
#      image's own python3, and /usr/local/bin/node-config-server, the entry point; rebuilt on
#      every run (seconds).
# Usage: build-image.sh OUT.tar [CACHE_DIR] (default ~/.cache/node-agent-image, or NODE_AGENT_IMAGE_CACHE).
# Prints the tag and the archive's size. Needs root (debootstrap, chroot, a mount namespace).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
out="${1:?usage: build-image.sh OUT.tar [CACHE_DIR]}"
cache="${2:-${NODE_AGENT_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/node-agent-image}}"
archive="$repo/tools/image_archive.py"

version=$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' "$repo/agent/__init__.py")
[ -n "$version" ] || { echo "build-image.sh: cannot read __version__ from agent/__init__.py" >&2; exit 1; }
tag="localhost/node-config-server:$version"
base="$(bash "$here/build-base.sh" "$cache")"
pyver="$(cd "$base/root/usr/lib" && ls -d python3.* | sort -V | tail -1)"
site="/usr/local/lib/$pyver/dist-packages"

mkdir -p "$(dirname "$out")"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# The files git tracks, as they are in the working tree (what you test is what you ship).
mkdir "$tmp/src"
(cd "$repo" && git ls-files -z --cached | while IFS= read -r -d '' f; do [ -f "$f" ] && printf '%s\0' "$f"; done \
    | tar --null -T - -cf -) | tar -C "$tmp/src" -xf -
mkdir "$tmp/dist"
wheel="$(cd "$tmp/src" && /usr/bin/python3 -c 'import sys; from setuptools import build_meta; print(build_meta.build_wheel(sys.argv[1]))' \
    "$tmp/dist" 2>"$tmp/wheel.log" | tail -1)" || { cat "$tmp/wheel.log" >&2; exit 1; }
wheel="$tmp/dist/$wheel"
python3 "$archive" wheel "$wheel" "$tmp/app" --site "$site" --script node-config-server
# Bytecode by the image's own python3 (the version its magic number names), checked against the
# source's hash, not its mtime (the layer's times are fixed); in a private mount namespace, over
# the cached base's /usr/local, which stays as it is.
unshare --mount --propagation private sh -c \
    'mount --bind "$1/usr/local" "$2/usr/local" && chroot "$2" python3 -m compileall -q --invalidation-mode checked-hash "$3"' \
    sh "$tmp/app" "$base/root" "$site"
python3 "$archive" layer "$tmp/app" "$tmp/app.tar" --mtime 0
python3 "$archive" image "$out" "$tag" --layer "$base/layer.tar" --layer "$tmp/app.tar" \
    --history "tools/image/build-base.sh: Debian trixie minbase, $(grep -v '^#' "$here/packages.txt" | grep -v '^$' | paste -sd' ' -)" \
    --history "tools/image/build-image.sh: $(basename "$wheel")" \
    --entrypoint /usr/local/bin/node-config-server --user 1001:1001 \
    --env PYTHONDONTWRITEBYTECODE=1 --env PYTHONUNBUFFERED=1 \
    --label org.opencontainers.image.title=node-config-server \
    --label org.opencontainers.image.version="$version" >"$tmp/id"
echo "$tag $(cat "$tmp/id") $out $(du -m "$out" | cut -f1) MB"
