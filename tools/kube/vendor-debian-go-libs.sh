#!/bin/bash
# Replaces two vendored Go libraries of the Kubernetes 1.20.2 tree given as $1 with the versions
# Debian 12 packages (and Kubernetes itself moved to for Go >= 1.18):
#   github.com/modern-go/reflect2   1.0.1 -> 1.0.2   (1.0.1 built with Go >= 1.18 makes the
#                                   apiserver crash, SIGSEGV in map iteration on the first custom
#                                   resource)                  golang-github-modern-go-reflect2-dev
#   github.com/json-iterator/go     1.1.10 -> 1.1.12 (the version that goes with reflect2 1.0.2)
#                                                              golang-github-json-iterator-go-dev
# Only the packages' own top-level files are copied, without tests (vendor/ holds no more).
set -euo pipefail
tree=${1:?usage: vendor-debian-go-libs.sh KUBERNETES_SOURCE_TREE}
gocode=${NODE_AGENT_GOCODE:-/usr/share/gocode/src}

replace() {
  local pkg=$1 src=$gocode/$1 dst=$tree/vendor/$1 f
  [ -f "$src/go.mod" ] || { echo "error: $src not found" >&2; return 1; }
  [ -d "$dst" ] || { echo "error: $dst not found (not a Kubernetes tree?)" >&2; return 1; }
  rm -rf "$dst"
  mkdir -p "$dst"
  for f in "$src"/*; do
    [ -f "$f" ] || continue                      # subpackages and test data: not vendored
    case $f in *_test.go) continue ;; esac
    cp "$f" "$dst/"
  done
  # Debian keeps the licence in /usr/share/doc; vendor/ must carry it.
  [ -f "$dst/LICENSE" ] || cp "$tree/LICENSES/vendor/$pkg/LICENSE" "$dst/LICENSE" 2>/dev/null || true
}

replace github.com/modern-go/reflect2
replace github.com/json-iterator/go
