#!/bin/bash
# The guest images' cache (build-image.sh, which calls this under its lock): images not used for
# a day (other trees' versions; each use touches done) go, each about 1.3 GB; of the others at
# most KEEP stay, the most recently used: every change of a project file makes a new one, and a
# day of work made twenty (26 GB, the disk full mid-run). A killed build's temporary directory
# goes too (the caller holds the lock: no other build is under way).
# usage: prune-images.sh CACHE_DIR KEEP
set -euo pipefail
cache="${1:?usage: prune-images.sh CACHE_DIR KEEP}"
keep="${2:?usage: prune-images.sh CACHE_DIR KEEP}"
for old in "$cache"/image-*; do
    if [ -n "$(find "$old/done" -mmin +1440 2>/dev/null)" ]; then rm -rf "$old"; fi
done
# ls fails when no image is there (an empty cache, a new machine): that is nothing to prune.
{ ls -1t "$cache"/image-*/done 2>/dev/null || true; } | tail -n +$((keep + 1)) | while IFS= read -r done; do
    rm -rf "$(dirname "$done")"
done
rm -rf "$cache"/.image-*
