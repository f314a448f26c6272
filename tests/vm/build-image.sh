#!/usr/bin/env bash
# The VM test's clean guest image: usage build-image.sh CACHE_DIR; prints the directory holding
# disk.img (ext4, the whole root), vmlinuz and initrd.img. Needs root.
#
# Stage 1 (build-base.sh, cached): Debian bookworm minbase with the agent's Debian dependencies.
# Stage 2 (here, cached): the node-agent RPM built from this tree (packaging/build-rpm.sh) and
# installed into the root with rpm itself, scriptlets included (its %post presets the units
# inside the chroot), so paths and unit files are exactly the RPM's; then the test's guest files
# (tests/vm/guest: network, the kubelet's unit and config, a probe unit, containerd's and CNI's config), a
# planted boot-image aleph file, the kubelet binary and the container images (pause from the
# Kubernetes source, busybox) from `make kube-bin`'s directory, written as docker-archive
# tarballs by tools/image_archive.py for vm-images.service to import, and node-config-server's own
# image (`make image`: tools/image/build-image.sh, rebuilt here into build/node-config-server-image.tar
# from this tree whenever the guest image is, so the pod runs the code under test), which the
# scenario runs as deploy/daemonset.yaml's pod (tests/vm/serverpod.py).
# The cache key covers the base, this script, the guest files, tools/image_archive.py, tools/image/
# (the server image's recipe and base), the kube-bin directory (its name is its build's key) and
# every project file the RPM and the server image pack, so a re-run with nothing changed only
# prints the path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cache="${1:?usage: build-image.sh CACHE_DIR}"
base="$("$here/build-base.sh" "$cache")"
kubebin="$(bash "$repo/tools/kube/build-kube-bin.sh" --find)" || {
    echo "build-image.sh: the kubelet and pause are not built: run make kube-bin" >&2; exit 1; }
kubebin="$(printf '%s\n' "$kubebin" | tail -n1)"

project_files() {  # what build-rpm.sh packs: git's view of the tree, build outputs left out
    cd "$repo"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
        git ls-files --cached --others --exclude-standard
    else
        find . -path ./.venv -prune -o -path ./build -prune -o -path ./.git -prune -o -type f -printf '%P\n'
    fi | grep -v -e '^build/' -e '^dist/' -e '^\.venv/' -e '^tests/' -e '^benchmarks/' | LC_ALL=C sort |
        while IFS= read -r f; do [ -f "$f" ] && sha256sum "$f"; done
}
key="$( { echo "$base"; echo "$kubebin"; cat "$here/build-image.sh" "$repo/tools/image_archive.py" "$repo"/tools/image/*; (cd "$here/guest" && find . -type f | LC_ALL=C sort | xargs sha256sum);
          project_files; } | sha256sum | cut -c1-16)"
out="$cache/image-$key"
if [ -f "$out/done" ]; then touch "$out/done"; echo "$out"; exit 0; fi

# One build at a time per cache (several checkouts may run the test at once).
exec 9>"$cache/.image.lock"
flock 9
if [ -f "$out/done" ]; then echo "$out"; exit 0; fi
bash "$here/prune-images.sh" "$cache" 3  # the three most recently used images stay
tmp="$(mktemp -d "$cache/.image-XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
echo "build-image.sh: installing the node-agent RPM into a copy of $base" >&2
cp -a "$base/root" "$root"

# Not the caller's PYTHONPATH (make vm-test in a checkout sets it to the tree): pip in rpmbuild
# would find the tree's node_agent.egg-info there and skip installing into the buildroot.
rpms="$(env -u PYTHONPATH bash "$repo/packaging/build-rpm.sh" "$tmp/rpm")"
agent_rpm="$(printf '%s\n' "$rpms" | grep '/node-agent-[0-9][^/]*\.noarch\.rpm$')"
# --nodeps: the Requires (python3-requests...) are Debian packages here, not in rpm's database.
rpm --root "$root" --initdb
rpm --root "$root" --nodeps -i "$agent_rpm"

# The server's image, as `make image` builds it (its base cached in NODE_AGENT_IMAGE_CACHE).
server_image="$repo/build/node-config-server-image.tar"
echo "build-image.sh: building $server_image (make image)" >&2
env -u PYTHONPATH bash "$repo/tools/image/build-image.sh" "$server_image" >&2

cp -a "$here/guest/." "$root/"
install -m 0755 "$kubebin/kubelet" "$root/usr/bin/kubelet"
# The images pods run (no registry is reachable from the guest); busybox's applets as links.
mkdir -p "$root/usr/share/vm-test/images"
python3 "$repo/tools/image_archive.py" "$root/usr/share/vm-test/images/pause.tar" localhost/pause:3.4 \
    --file "$kubebin/pause=/pause" --entrypoint /pause
links=(); for a in sh sleep echo cat ls ps kill true date hostname; do links+=(--link "/bin/$a=busybox"); done
python3 "$repo/tools/image_archive.py" "$root/usr/share/vm-test/images/busybox.tar" localhost/busybox:1.35 \
    --file "$root/bin/busybox=/bin/busybox" "${links[@]}" --cmd sh
cp "$server_image" "$root/usr/share/vm-test/images/node-config-server.tar"
# ...and imported into the guest's containerd store here, by the host's containerd (Debian 12's
# 1.6.20, the guest's own version) on the guest root's /var/lib/containerd: the guest's own import
# of it (about 165 MB, unpacked under TCG) took 65 s of boot 2, before kubelet could start.
# vm-images.service imports it from the tarball only if it is missing.
ctrd="$tmp/ctrd"
mkdir -p "$ctrd"
printf 'version = 2\ndisabled_plugins = ["io.containerd.grpc.v1.cri"]\n' > "$ctrd/config.toml"
containerd --config "$ctrd/config.toml" --root "$root/var/lib/containerd" --state "$ctrd/state" \
    --address "$ctrd/sock" >"$ctrd/log" 2>&1 &
ctrd_pid=$!
for _ in $(seq 300); do ctr --address "$ctrd/sock" version >/dev/null 2>&1 && break; sleep 0.1; done
# pause and busybox too: vm-images.service then imports nothing at boot (13-18 s of each boot under
# TCG before kubelet, the reboot's too).
for tarball in "$server_image" "$root/usr/share/vm-test/images/pause.tar" "$root/usr/share/vm-test/images/busybox.tar"; do
    ctr --address "$ctrd/sock" -n k8s.io images import "$tarball" >&2 || { cat "$ctrd/log" >&2; kill "$ctrd_pid"; exit 1; }
done
# The list read whole, then searched: `ctr ... | grep -q` under pipefail failed when grep quit at
# its first match and ctr, still writing, got SIGPIPE (an image reported missing that was there).
ctr --address "$ctrd/sock" -n k8s.io images list -q > "$ctrd/images"
for ref in localhost/node-config-server: localhost/pause:3.4 localhost/busybox:1.35; do
    grep -q "^$ref" "$ctrd/images" || {
        echo "build-image.sh: $ref is not in the guest's containerd after its import" >&2; kill "$ctrd_pid"; exit 1; }
done
kill "$ctrd_pid"
wait "$ctrd_pid" || true
rm -rf "$ctrd"
# The boot image's aleph file, as on RHCOS (the skew check reads it); a version the served rules
# accept.
mkdir -p "$root/sysroot"
zeros="$(printf '0%.0s' $(seq 64))"
printf '{"version": "9.6.20250121-0", "ref": "", "ostree-commit": "%s", "container-image": {"image": "%s", "imgid": "sha256:%s"}}\n' \
    "$zeros" "$(cat "$here/guest/etc/vm-test/booted-image")" "$zeros" > "$root/sysroot/.aleph-version.json"
ln -sf .aleph-version.json "$root/sysroot/.coreos-aleph-version.json"
mkdir -p "$root/var/log/journal"
chroot "$root" systemctl enable systemd-networkd.service systemd-networkd-wait-online.service \
    kubelet.service vm-probe.service vm-kubelet-check.service containerd.service vm-images.service >/dev/null 2>&1
# Timers and services that only cost boot time here.
chroot "$root" systemctl mask apt-daily.timer apt-daily-upgrade.timer e2scrub_all.timer \
    e2scrub_reap.service fstrim.timer >/dev/null 2>&1 || true
printf '/dev/vda / ext4 rw,errors=remount-ro 0 1\n' > "$root/etc/fstab"
# root logs in on the serial console without a password (a debugging aid; no network login).
chroot "$root" passwd -d root >/dev/null

# 3G (sparse): the server image (about 170 MB) is in the root as a tarball and, once imported, in
# containerd's content store and its snapshot.
mkfs.ext4 -q -F -L vmroot -d "$root" "$tmp/disk.img" 3G >&2
cp "$base/vmlinuz" "$base/initrd.img" "$tmp/"
rm -rf "$root" "$tmp/rpm"
touch "$tmp/done"
rm -rf "$out"
mv "$tmp" "$out"
trap - EXIT
echo "$out"
