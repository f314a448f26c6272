#!/bin/bash
# Builds (or finds) kube-apiserver, kube-controller-manager, kube-scheduler and kubelet 1.20.2:
# the first three for the tests' loopback control plane (tests/helpers/kube_cluster.py), the
# kubelet for the VM guest (tests/vm/build-image.sh), all from Debian 12's source package `kubernetes`
# (its binary package is kubectl only), with the fixes in this directory:
#   kube-openapi-type-null.patch  - "", 0 and false are not null (Go >= 1.18)
#   vendor-debian-go-libs.sh      - reflect2 1.0.2 and json-iterator 1.1.12 from Debian's packages
#
# The binaries are cached outside the tree, in
#   ${NODE_AGENT_KUBE_CACHE:-$HOME/.cache/node-agent-kube}/<key>/bin
# where <key> hashes the source version, this script, the patch files and the versions of the
# Debian packages the build takes code from. A cache hit downloads and builds nothing.
# The last line of stdout is the bin directory; the build's own output goes to stderr.
# With --find it only looks: the directory when it is built, else exit status 3.
#
# The same source's build/pause/linux/pause.c is compiled (gcc -static) into bin/pause: the
# guest's pod sandbox image is made from it (no registry is reachable from the VM test).
#
# Needs (make sysdeps installs them): gcc libc6-dev golang-go rsync jq dpkg-dev patch
#   golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev, and apt-get.
# The source is fetched with apt-get and a private source list and lists directory: the
# machine's apt set-up is neither read for packages nor changed. The mirror is the one the
# machine's apt uses (or NODE_AGENT_KUBE_APT_URI, e.g. a snapshot.debian.org URL).
set -euo pipefail

KUBE_DEB_VERSION=1.20.5+really1.20.2-1.1+deb12u1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE_ROOT=${NODE_AGENT_KUBE_CACHE:-$HOME/.cache/node-agent-kube}
LIB_PACKAGES="golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev"

fail() {  # one line of error, one line of what to do; non-zero exit
  echo "error: build-kube-bin: $1" >&2
  echo "what to do: $2" >&2
  exit 1
}

cache_key() {
  {
    echo "kubernetes $KUBE_DEB_VERSION"
    cat "$HERE/build-kube-bin.sh" "$HERE/vendor-debian-go-libs.sh" "$HERE"/*.patch
    # shellcheck disable=SC2086
    dpkg-query -W -f='${Package} ${Version}\n' $LIB_PACKAGES golang-go 2>/dev/null || true
  } | sha256sum | cut -c1-16
}

KEY=$(cache_key)
DIR=$CACHE_ROOT/$KEY
BIN=$DIR/bin
KUBE_CMDS="kube-apiserver kube-controller-manager kube-scheduler kubelet"
PAUSE_VERSION=3.4  # build/pause/Makefile's TAG in this source
have_bin() {  # all four and pause, or the cache entry is not built
  local c
  for c in $KUBE_CMDS pause; do [ -x "$BIN/$c" ] || return 1; done
}

if have_bin; then echo "$BIN"; exit 0; fi
if [ "${1:-}" = "--find" ]; then        # look only (the tests' fixture): never download or build
  echo "not built: $BIN (run make kube-bin)" >&2
  exit 3
fi

# The deb-src line: the Debian mirror this machine's apt already uses for bookworm.
apt_uri() {
  if [ -n "${NODE_AGENT_KUBE_APT_URI:-}" ]; then echo "$NODE_AGENT_KUBE_APT_URI"; return; fi
  local f uri
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri=$(awk 'BEGIN{RS=""; FS="\n"} /(^|\n)Suites:[^\n]*[ \t]bookworm([ \t]|\n|$)/ {
             for (i = 1; i <= NF; i++) if ($i ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", $i);
               split($i, u, /[ \t]+/); print u[1]; exit } }' "$f")
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri=$(sed -nE 's/^deb(-src)?[ \t]+(\[[^]]*\][ \t]+)?([^ \t]+)[ \t]+bookworm[ \t].*/\3/p' "$f" | head -n1)
    [ -n "$uri" ] && { echo "$uri"; return; }
  done
  echo "http://deb.debian.org/debian"
}

missing=""
for tool in go gcc rsync jq apt-get dpkg-source patch sha256sum flock; do
  command -v "$tool" >/dev/null || missing="$missing $tool"
done
for p in $LIB_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] || fail "missing:$missing" \
  "make sysdeps (as root), or apt-get install golang-go rsync jq dpkg-dev $LIB_PACKAGES"

mkdir -p "$DIR"
exec 9>"$DIR/lock"
flock 9                                   # a second run waits for the first, then finds its bin
if have_bin; then echo "$BIN"; exit 0; fi

WORK=$DIR/work
LOG=$DIR/build.log
rm -rf "$WORK" "$BIN.tmp"
mkdir -p "$WORK/apt/lists/partial"
: >"$LOG"
run() {  # a build step: its output to stderr and the log; on failure the one-line error
  local what=$1; shift
  echo ">>> $what" >&2
  "$@" 2>&1 | tee -a "$LOG" >&2 || fail "$what failed (log: $LOG)" \
    "read the end of $LOG; the source is kept in $WORK; re-run when fixed"
}

keyring=/usr/share/keyrings/debian-archive-keyring.gpg
opt=""; [ -f "$keyring" ] && opt="[signed-by=$keyring] "
echo "deb-src ${opt}$(apt_uri) bookworm main" >"$WORK/apt/sources.list"
APT=(apt-get -q -o "Dir::Etc::sourcelist=$WORK/apt/sources.list" -o Dir::Etc::sourceparts=/nonexistent
     -o "Dir::State::Lists=$WORK/apt/lists" -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache=)
cd "$WORK"
run "apt-get update (private source list $(cat "$WORK/apt/sources.list"))" "${APT[@]}" update
"${APT[@]}" source --download-only "kubernetes=$KUBE_DEB_VERSION" >>"$LOG" 2>&1 \
  || fail "could not download source package kubernetes=$KUBE_DEB_VERSION (log: $LOG)" \
          "check the network; or set NODE_AGENT_KUBE_APT_URI to a Debian mirror (or a snapshot.debian.org archive URL) whose bookworm has that version"
run "dpkg-source -x" dpkg-source -x "kubernetes_${KUBE_DEB_VERSION#*:}.dsc" src
SRC=$WORK/src
run "patch: kube-openapi-type-null.patch" patch -d "$SRC" -p1 --forward -i "$HERE/kube-openapi-type-null.patch"
run "vendor: reflect2 1.0.2, json-iterator 1.1.12 from Debian" bash "$HERE/vendor-debian-go-libs.sh" "$SRC"

# The GOPATH layout of debian/rules; hack/lib/init.sh sets GO111MODULE=off itself.
mkdir -p "$SRC/.go/src/k8s.io" "$WORK/home"
ln -s ../../.. "$SRC/.go/src/k8s.io/kubernetes"
# CGO_ENABLED=0 makes the kubelet static too, so the guest needs no Go runtime libraries.
BUILD_ENV=(env -C "$SRC" GOPATH="$SRC/.go" GO111MODULE=off GOFLAGS= CGO_ENABLED=0 HOME="$WORK/home"
           GOCACHE="$WORK/gocache" KUBE_VERBOSE=1)
# Not `make WHAT=...`: its generated_files step builds and runs six code generators one after
# the other (6.5 minutes of one build on 2 cores) to rewrite the deepcopy, defaults, conversion
# and prerelease-lifecycle files, which this source ships already (1.20 keeps them in git; only
# zz_generated.openapi.go is .gitignored). So only the OpenAPI definitions are generated: the
# whole script took 4 min 37 s from an empty cache on the same 2 cores.
run "make gen_openapi (pkg/generated/openapi, not shipped in the source)" "${BUILD_ENV[@]}" make gen_openapi
[ -s "$SRC/pkg/generated/openapi/zz_generated.openapi.go" ] \
  || fail "make gen_openapi wrote no pkg/generated/openapi/zz_generated.openapi.go (log: $LOG)" "read $LOG"
WHAT=""; for c in $KUBE_CMDS; do WHAT="$WHAT cmd/$c"; done
run "hack/make-rules/build.sh${WHAT} (about 4 minutes on 2 cores)" "${BUILD_ENV[@]}" hack/make-rules/build.sh $WHAT

mkdir -p "$BIN.tmp"
echo "kubernetes $KUBE_DEB_VERSION (Debian source) + tools/kube patches, key $KEY" >"$BIN.tmp/VERSION"
for c in $KUBE_CMDS; do
  cp "$SRC/_output/bin/$c" "$BIN.tmp/"
  "$BIN.tmp/$c" --version >>"$BIN.tmp/VERSION" 2>&1 \
    || fail "the built $c does not run (log: $LOG)" "read $LOG"
done
# build/pause/Makefile's flags; static, so the image needs nothing but this one file
run "gcc -static build/pause/linux/pause.c" \
  gcc -Os -Wall -Werror -static "-DVERSION=v$PAUSE_VERSION-node-agent" -o "$BIN.tmp/pause" "$SRC/build/pause/linux/pause.c"
"$BIN.tmp/pause" -v >>"$BIN.tmp/VERSION" 2>&1 || fail "the built pause does not run (log: $LOG)" "read $LOG"
mv "$BIN.tmp" "$BIN"
rm -rf "$WORK"        # the tree and Go's build cache (several GB): only bin/ is kept
echo "built in $DIR" >&2
echo "$BIN"
