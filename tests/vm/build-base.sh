#!/usr/bin/env bash
# Stage 1 of the VM test's guest: a Debian bookworm root (debootstrap --variant=minbase) with the
# packages in guest-packages.txt, plus its kernel and initramfs. Slow (minutes under load), so it
# is cached, keyed on this script and the package list: usage build-base.sh CACHE_DIR, prints the
# directory that holds root/, vmlinuz and initrd.img. Needs root (debootstrap chroots).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${1:?usage: build-base.sh CACHE_DIR}"
suite=bookworm
key="$(cat "$here/build-base.sh" "$here/guest-packages.txt" | sha256sum | cut -c1-16)"
out="$cache/base-$key"
if [ -f "$out/done" ]; then touch "$out/done"; echo "$out"; exit 0; fi

# The archive this machine's apt already uses (so no host is written down here).
mirror="${NODE_AGENT_VM_MIRROR:-$(apt-get indextargets --format '$(SITE) $(RELEASE)' 'Created-By: Packages' \
    | awk -v s="$suite" '$2 == s {print $1; exit}')}"
[ -n "$mirror" ] || { echo "build-base.sh: no $suite archive in apt's sources; set NODE_AGENT_VM_MIRROR" >&2; exit 1; }
pkgs="$(grep -v '^#' "$here/guest-packages.txt" | grep -v '^$' | paste -sd, -)"

mkdir -p "$cache"
# One build at a time per cache (several checkouts may run the test at once).
exec 9>"$cache/.base.lock"
flock 9
if [ -f "$out/done" ]; then echo "$out"; exit 0; fi
# Bases not used for a day (older package lists or scripts; each use touches done) go.
for old in "$cache"/base-*; do
    [ -n "$(find "$old/done" -mmin +1440 2>/dev/null)" ] && rm -rf "$old"
done
tmp="$(mktemp -d "$cache/.base-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "build-base.sh: debootstrap $suite ($pkgs) into $tmp (takes minutes)" >&2
# initramfs-tools would build a "most" initramfs for every module; the guest only needs virtio
# and ext4, and a small initramfs builds (and boots) faster under TCG.
# (conf.d/ and hooks/ hold no package's conffiles, so dpkg asks nothing about these.)
mkdir -p "$tmp/root/etc/initramfs-tools/conf.d" "$tmp/root/etc/initramfs-tools/hooks"
echo MODULES=list > "$tmp/root/etc/initramfs-tools/conf.d/node-agent-vm.conf"
cat > "$tmp/root/etc/initramfs-tools/hooks/node-agent-vm" <<'HOOK'
#!/bin/sh
[ "$1" = prereqs ] && exit 0
. /usr/share/initramfs-tools/hook-functions
for m in virtio_pci virtio_blk ext4; do manual_add_modules "$m"; done
HOOK
chmod +x "$tmp/root/etc/initramfs-tools/hooks/node-agent-vm"
debootstrap --variant=minbase --include="$pkgs" "$suite" "$tmp/root" "$mirror" >"$tmp/debootstrap.log" 2>&1 || {
    tail -40 "$tmp/debootstrap.log" >&2; exit 1; }
cp -L "$tmp/root/vmlinuz" "$tmp/vmlinuz"
cp -L "$tmp/root/initrd.img" "$tmp/initrd.img"
# Not needed in the guest: apt lists, docs, man pages, locales; modules for hardware QEMU does
# not emulate here (the kernel and initramfs above stay whole).
rm -rf "$tmp/root/var/cache/apt/"*.bin "$tmp/root/var/lib/apt/lists/"* "$tmp/root/var/cache/apt/archives/"*.deb \
    "$tmp/root/usr/share/doc" "$tmp/root/usr/share/man" "$tmp/root/usr/share/locale"
moddir="$(ls -d "$tmp/root/lib/modules/"*)"
rm -rf "$moddir/kernel/drivers/"{gpu,media,net/wireless,infiniband,staging,bluetooth,iio,isdn,sound} \
    "$moddir/kernel/sound" "$moddir/kernel/net/"{wireless,mac80211,bluetooth}
mv "$tmp/debootstrap.log" "$tmp/root/var/log/" 2>/dev/null || true
touch "$tmp/done"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
