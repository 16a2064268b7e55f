#!/usr/bin/env bash
# scripts/build-tiny-vm.sh DIR [AGENT]: the tiny test VM image, from Debian packages only and
# offline but for `apt-get download` of the kernel: the Debian cloud kernel (unpacked, not
# installed), an initramfs of busybox-static and the kernel's virtio modules, an ext4 disk made
# with mke2fs -d, into which Packer's qemu builder (drivers/vm-packer/image/tiny-vm.json, TCG)
# installs the sandboxer guest agent AGENT (default: the one in build/). The disk also has
# Debian's dropbear (with its libraries) and a throwaway key of this build in root's
# authorized_keys, for `exec: { via: ssh }` over a restricted network. Writes under DIR:
#   output/tiny.qcow2, manifest.json (Packer's), vmlinuz, initrd.img, profile.yaml (a working
#   vm-packer profile), ssh/id_ed25519 (the key), inputs.sha256.
# Nothing is rebuilt when inputs.sha256 matches the inputs (this script, the image files, the
# agent, the kernel, busybox and packer versions): a second run only checks, in a few seconds.
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 1 ] || { echo "usage: $0 DIR [AGENT]" >&2; exit 2; }
DIR=$(realpath -m "$1")
AGENT=$(realpath "${2:-$SRC/build/drivers/vm-packer/sandboxer-guest-agent}")
IMAGE_SRC="$SRC/drivers/vm-packer/image"
say() { echo "build-tiny-vm: $*" >&2; }

for tool in packer qemu-system-x86_64 qemu-img mke2fs dpkg-deb apt-get gzip sha256sum ssh-keygen; do
  command -v "$tool" >/dev/null || { say "$tool is missing (scripts/install-deps.sh installs it)"; exit 3; }
done
[ -x /bin/busybox ] && /bin/busybox --list >/dev/null || { say "busybox-static is missing"; exit 3; }
[ -x /usr/sbin/dropbear ] || { say "dropbear-bin is missing"; exit 3; }
[ -x "$AGENT" ] || { say "no guest agent at $AGENT (build the sandboxer-guest-agent target)"; exit 3; }

KERNEL_PKG=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null |
  awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
[ -n "$KERNEL_PKG" ] || { say "apt does not know linux-image-cloud-amd64 (apt-get update?)"; exit 3; }
KERNEL_VERSION=$(apt-cache show --no-all-versions "$KERNEL_PKG" | awk '/^Version:/ {print $2; exit}')
BUSYBOX_VERSION=$(dpkg-query -W -f='${Version}' busybox-static)
DROPBEAR_VERSION=$(dpkg-query -W -f='${Version}' dropbear-bin)
PACKER_VERSION=$(packer version | head -1)

# Tests in parallel share one DIR: one builds, the others wait and find it up to date.
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
flock 9

HASH=$({
  sha256sum "$0" "$IMAGE_SRC"/* "$AGENT" | awk '{print $1}'
  echo "$KERNEL_PKG $KERNEL_VERSION busybox $BUSYBOX_VERSION dropbear $DROPBEAR_VERSION $PACKER_VERSION"
} | sha256sum | awk '{print $1}')
if [ "$(cat "$DIR/inputs.sha256" 2>/dev/null)" = "$HASH" ] && [ -f "$DIR/profile.yaml" ] &&
  [ -f "$DIR/output/tiny.qcow2" ]; then
  say "up to date ($DIR, inputs $HASH)"
  exit 0
fi
say "building in $DIR (inputs $HASH)"
rm -rf "$DIR/.work" "$DIR/output" "$DIR/ssh" "$DIR/inputs.sha256"
WORK="$DIR/.work"
mkdir -p "$WORK"

# The kernel package, kept between builds of any DIR.
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/sandboxer/debs"
mkdir -p "$CACHE"
DEB=$(ls "$CACHE/${KERNEL_PKG}_"*"_amd64.deb" 2>/dev/null | grep -F "_${KERNEL_VERSION//:/%3a}_" || true)
if [ -z "$DEB" ]; then
  (cd "$CACHE" && timeout 300 apt-get download "$KERNEL_PKG=$KERNEL_VERSION" >/dev/null 2>&1) ||
    { say "apt-get download $KERNEL_PKG failed"; exit 3; }
  DEB=$(ls "$CACHE/${KERNEL_PKG}_"*"_amd64.deb" | head -1)
fi
dpkg-deb -x "$DEB" "$WORK/kernel"
cp "$WORK/kernel"/boot/vmlinuz-* "$DIR/vmlinuz"

# The initramfs: busybox, the virtio modules, /init, and what the provisioning boot installs.
RAMFS="$WORK/initramfs"
mkdir -p "$RAMFS"/{bin,proc,sys,dev,newroot,modules,agent}
cp /bin/busybox "$RAMFS/bin/busybox"
for applet in sh mount umount mkdir insmod sleep cp chmod echo grep date sync poweroff switch_root cat; do
  ln -s busybox "$RAMFS/bin/$applet"
done
for module in virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci \
  virtio_console virtio_blk failover net_failover virtio_net; do
  found=$(find "$WORK/kernel/lib/modules" -name "$module.ko" | head -1)
  [ -n "$found" ] && cp "$found" "$RAMFS/modules/"
done
install -m 0755 "$IMAGE_SRC/initramfs-init" "$RAMFS/init"
install -m 0755 "$AGENT" "$RAMFS/agent/sandboxer-guest-agent"
install -m 0755 "$IMAGE_SRC/guest-init" "$RAMFS/agent/guest-init"
(cd "$RAMFS" && find . | /bin/busybox cpio -o -H newc 2>/dev/null | gzip -1 >"$DIR/initrd.img")

# The bare disk: busybox with every applet, a root user, no agent yet.
ROOT="$WORK/rootfs"
mkdir -p "$ROOT"/{bin,sbin,usr/bin,usr/sbin,etc,root,tmp,run,proc,sys,dev}
cp /bin/busybox "$ROOT/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -sf busybox "$ROOT/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$ROOT/etc/passwd"
printf 'root:x:0:\n' >"$ROOT/etc/group"
printf '/bin/sh\n' >"$ROOT/etc/shells"
# dropbear and the libraries it links, where Debian's loader looks for them.
install -D -m 0755 /usr/sbin/dropbear "$ROOT/usr/sbin/dropbear"
for lib in $(ldd /usr/sbin/dropbear | grep -o '/[^ ]*'); do
  install -D -m 0755 "$(realpath "$lib")" "$ROOT$lib"
done
mkdir -p "$ROOT/etc/dropbear" "$DIR/ssh"
ssh-keygen -q -t ed25519 -N '' -C "sandboxer tiny VM" -f "$DIR/ssh/id_ed25519"
install -D -m 0600 "$DIR/ssh/id_ed25519.pub" "$ROOT/root/.ssh/authorized_keys"
chmod 0700 "$ROOT/root" "$ROOT/root/.ssh"
chmod 1777 "$ROOT/tmp"
mke2fs -q -t ext4 -L sandboxer -d "$ROOT" -E root_owner=0:0 "$WORK/base.raw" 256M
qemu-img convert -f raw -O qcow2 "$WORK/base.raw" "$WORK/base.qcow2"

# Packer installs the agent: it boots the disk with sandboxer.provision, and the guest powers off.
say "packer build (qemu, TCG)"
export CHECKPOINT_DISABLE=1 PACKER_CACHE_DIR="$WORK/packer_cache" PACKER_CONFIG_DIR="$WORK"
if ! timeout 600 packer build -force -color=false \
  -var "base_disk=$WORK/base.qcow2" -var "kernel=$DIR/vmlinuz" -var "initrd=$DIR/initrd.img" \
  -var "output_directory=$DIR/output" -var "manifest=$DIR/manifest.json" \
  -var "serial_log=$WORK/provision.log" \
  "$IMAGE_SRC/tiny-vm.json" >"$WORK/packer.log" 2>&1; then
  say "packer failed:"
  tail -20 "$WORK/packer.log" >&2
  exit 1
fi
grep -q 'sandboxer-init: provisioned' "$WORK/provision.log" ||
  { say "the guest did not install the agent:"; tail -20 "$WORK/provision.log" >&2; exit 1; }

cat >"$DIR/profile.yaml" <<YAML
# The tiny test VM (scripts/build-tiny-vm.sh): busybox and the sandboxer guest agent on the Debian
# cloud kernel, booted directly. Paths are relative to this file.
driver: vm-packer
ttl: { default: 30m, max: 4h }
vm-packer:
  manifest: manifest.json
  kernel: vmlinuz
  initrd: initrd.img
  append: "console=ttyS0 quiet panic=-1 rdinit=/init"
  cpus: 1
  memory: 256m
  accel: auto
  network: none
YAML
rm -rf "$WORK"
echo "$HASH" >"$DIR/inputs.sha256"
say "done: $DIR/output/tiny.qcow2 ($(du -h "$DIR/output/tiny.qcow2" | cut -f1) on disk)"
