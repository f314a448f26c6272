#!/bin/bash
# Build the node-agent RPMs: bash packaging/build-rpm.sh [OUTDIR [TARGET]] (default build/rpm, native).
#
# TARGET native: for the build host's own rpm layout (its python3 and sitelib).
# TARGET el9: for RHEL 9 / RHCOS 9 (python3.9 sitelib /usr/lib/python3.9/site-packages, release
# suffix .el9, python3-tomli), built on any host; its bytecode is compiled by a CPython 3.9 when
# one is found (PY39, pyenv's 3.9, python3.9 on PATH), else none is shipped.
# Makes Source0 from the files git tracks, as they are in the working tree (so what you test is
# what you package, and nothing a run left behind, an examples/state/nodes.db say, is packed; a new
# file is packed once `git add`ed), runs rpmbuild -bb with _topdir under OUTDIR and prints the path
# of every RPM built, one per line, on stdout (rpmbuild's log goes to OUTDIR/rpmbuild.log).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
outdir=${1:-build/rpm}
target=${2:-native}
mkdir -p "$outdir"
topdir=$(cd "$outdir" && pwd)

die() { echo "build-rpm.sh: $*" >&2; exit 1; }
command -v rpmbuild >/dev/null || die "rpmbuild not found (Debian: apt-get install rpm; Fedora/RHEL: dnf install rpm-build)"

version=$(sed -n 's/^__version__ *= *["'\'']\([^"'\'']*\)["'\''].*/\1/p' "$repo/agent/__init__.py")
[ -n "$version" ] || die "cannot read __version__ from agent/__init__.py"
for f in examples/agent.yaml docs/operations.md systemd/node-agent.service; do
    [ -e "$repo/$f" ] || die "$f is missing: the spec installs it"
done

name=node-agent-$version
rm -rf "$topdir/BUILD" "$topdir/BUILDROOT" "$topdir/RPMS" "$topdir/SOURCES"
mkdir -p "$topdir"/{BUILD,BUILDROOT,RPMS,SOURCES,SPECS,SRPMS}

# The file list: the files git tracks when there is a git checkout, else (an unpacked tarball)
# everything but build output.
cd "$repo"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    list() { git ls-files -z --cached; }
else
    list() { find . -path ./.venv -prune -o -path ./build -prune -o -path ./.git -prune -o -type f -printf '%P\0'; }
fi
# Files deleted from the working tree but still in git's index are skipped, as are build outputs.
list | while IFS= read -r -d '' f; do
    case "$f" in build/*|dist/*|.venv/*) continue ;; esac
    [ -f "$f" ] && printf '%s\0' "$f"
done | tar --null -T - --transform "s,^,$name/," --owner=0 --group=0 --numeric-owner \
           --mtime="@${SOURCE_DATE_EPOCH:-0}" --sort=name -czf "$topdir/SOURCES/$name.tar.gz"
cp packaging/node-agent.spec "$topdir/SPECS/"

# On a system whose rpm database does not hold the build tools (Debian), rpm cannot check
# BuildRequires: they are Debian packages there.
nodeps=()
rpm -q --quiet rpm-build 2>/dev/null || rpm -q --quiet rpm 2>/dev/null || nodeps=(--nodeps)

# Neither RHEL 9 nor EPEL 9 carries python3-pydbus (Fedora only; EPEL 8 was the last EL), so the
# el9 RPM bundles pydbus's pure-Python sdist as Source1, checked against PyPI's sha256. Kept in
# build/sources so that a re-run (and an offline one, once fetched) does not download it again.
PYDBUS_VERSION=0.6.0
PYDBUS_SHA256=4207162eff54223822c185da06c1ba8a34137a9602f3da5a528eedf3f78d0f2c
fetch_pydbus() {
    local cache="$repo/build/sources" sdist="pydbus-$PYDBUS_VERSION.tar.gz" pip
    mkdir -p "$cache"
    if ! echo "$PYDBUS_SHA256  $cache/$sdist" | sha256sum -c --quiet - >/dev/null 2>&1; then
        pip=$(command -v "$repo/.venv/bin/python" || command -v python3)
        "$pip" -m pip download --quiet --no-deps --no-binary :all: --dest "$cache" "pydbus==$PYDBUS_VERSION" >&2 \
            || die "cannot download $sdist from PyPI (put it in $cache)"
        echo "$PYDBUS_SHA256  $cache/$sdist" | sha256sum -c --quiet - || die "$cache/$sdist: sha256 mismatch"
    fi
    cp "$cache/$sdist" "$1/"
}

defines=()
case "$target" in
    native) ;;
    el9)
        defines=(--define "node_agent_el9 1")
        fetch_pydbus "$topdir/SOURCES"
        py39=${PY39:-}
        if [ -z "$py39" ]; then
            for cand in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.9*/bin/python3.9 "$(command -v python3.9 || true)"; do
                [ -x "$cand" ] && { py39=$cand; break; }
            done
        fi
        if [ -n "$py39" ]; then
            defines+=(--define "node_agent_python39 $py39")
        else
            echo "build-rpm.sh: no CPython 3.9 found: the el9 RPM ships no bytecode" >&2
        fi ;;
    *) die "unknown target '$target' (native or el9)" ;;
esac

# The caller's Python path stays out of the build: with a checkout on PYTHONPATH the build's pip
# took node-agent for installed already and put nothing into the buildroot (tools/suite_cpu.py's
# command sets PYTHONPATH=$PWD).
if ! env -u PYTHONPATH -u PYTHONHOME -u PYTHONUSERBASE rpmbuild -bb "${nodeps[@]}" "${defines[@]}" \
        --define "_topdir $topdir" \
        --define "node_agent_version $version" \
        --define "_binary_payload w2.xzdio" \
        "$topdir/SPECS/node-agent.spec" >"$topdir/rpmbuild.log" 2>&1; then
    tail -n 40 "$topdir/rpmbuild.log" >&2
    die "rpmbuild failed; full log: $topdir/rpmbuild.log"
fi
find "$topdir/RPMS" -name '*.rpm' -type f | sort
