#!/usr/bin/env bash
# The server image's base layer (make image-base; tools/image/build-image.sh adds the server):
# Debian trixie, debootstrap --variant=minbase with the packages in packages.txt, a non-root user
# (node-config-server, uid and gid 1001: deploy/daemonset.yaml's runAsUser), no docs, man pages,
# locales, apt lists or caches, no setuid/setgid bit and nothing world-writable but the sticky
# /tmp and /var/tmp. Written as one layer tarball (tools/image_archive.py). Slow once (minutes:
# download and unpack), then cached, keyed on this script, packages.txt and image_archive.py:
#   build-base.sh CACHE_DIR   prints the directory holding root/, layer.tar and packages.txt
# (dpkg's list of what the layer holds). Needs root (debootstrap chroots) and debootstrap.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:?usage: build-base.sh CACHE_DIR}"
suite=trixie
key="$(cat "$here/build-base.sh" "$here/packages.txt" "$here/../image_archive.py" | sha256sum | cut -c1-16)"
out="$cache/base-$key"
if [ -f "$out/done" ]; then touch "$out/done"; echo "$out"; exit 0; fi
command -v debootstrap >/dev/null || { echo "build-base.sh: debootstrap not found (make sysdeps installs it)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "build-base.sh: debootstrap needs root; run make image-base as root" >&2; exit 1; }

# The Debian archive this machine's apt already uses: the one it has trixie from, else the one of
# its own release (Debian 12's machines: trixie is in the same archive as bookworm).
own="$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")"
mirror="${NODE_AGENT_IMAGE_MIRROR:-$(apt-get indextargets --format '$(SITE) $(RELEASE)' 'Created-By: Packages' 2>/dev/null \
    | awk -v s="$suite" -v o="$own" '$2 == s {print $1; exit} $2 == o && !f {f = $1} END {if (f) print f}' | head -1)}"
[ -n "$mirror" ] || { echo "build-base.sh: no Debian archive in apt's sources; set NODE_AGENT_IMAGE_MIRROR" >&2; exit 1; }
pkgs="$(grep -v '^#' "$here/packages.txt" | grep -v '^$' | paste -sd, -)"

mkdir -p "$cache"
exec 9>"$cache/.base.lock"  # one build at a time per cache (several checkouts may build at once)
flock 9
if [ -f "$out/done" ]; then echo "$out"; exit 0; fi
for old in "$cache"/base-*; do  # bases not used for a day (older recipes; each use touches done) go
    [ -n "$(find "$old/done" -mmin +1440 2>/dev/null)" ] && rm -rf "$old"
done
tmp="$(mktemp -d "$cache/.base-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "build-base.sh: debootstrap $suite ($pkgs) into $tmp (takes minutes)" >&2
debootstrap --variant=minbase --include="$pkgs" "$suite" "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 || {
    tail -40 "$tmp/debootstrap.log" >&2; exit 1; }
root="$tmp/root"
# 1001: deploy/daemonset.yaml's runAsUser (not a --system id: those end at 999).
chroot "$root" groupadd --gid 1001 node-config-server
chroot "$root" useradd --uid 1001 --gid 1001 --no-create-home --home-dir /nonexistent \
    --shell /usr/sbin/nologin node-config-server
chroot "$root" dpkg-query -W -f '${Package} ${Version}\n' > "$tmp/packages.txt"
# Not needed at run time: apt's lists and caches, docs, man and info pages, locales, logs.
rm -rf "$root/var/lib/apt/lists/"* "$root/var/cache/apt/"* "$root/var/cache/debconf/"*-old \
    "$root/usr/share/doc" "$root/usr/share/man" "$root/usr/share/info" "$root/usr/share/locale" \
    "$root/var/log/"* "$root/run/"* "$root/dev/"*
# Nothing runs as root in the container, and a setuid program would be the way up: no setuid or
# setgid bit (su, mount, passwd, chage...; the setgid /var/mail too). Nothing world-writable but
# the sticky /tmp and /var/tmp.
find "$root" -xdev ! -type l -perm /6000 -exec chmod ug-s {} +
find "$root" -xdev -perm -0002 ! -type l ! \( -type d -perm -1000 \) -exec chmod o-w {} +
find "$root" -xdev -type d -perm -1002 ! -path "$root/tmp" ! -path "$root/var/tmp" -exec chmod o-w {} +
python3 "$here/../image_archive.py" layer "$root" "$tmp/layer.tar"
touch "$tmp/done"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
