#!/usr/bin/env bash
# The vm-packer driver's cost, in one run, on the tiny image (scripts/build-tiny-vm.sh):
# 1. create until exec works: `sandboxer create` (which returns once the guest agent answers)
#    against QEMU started by hand with the same argv until the agent answers the same hello
#    (target ratio <= 1.1);
# 2. restore from a memory checkpoint against a cold boot, both until exec works (target <= 0.5).
# Usage: bench/vm-packer.sh [path/to/sandboxer] [path/to/sandboxer-guest-agent] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
AGENT=$(realpath "${2:-build/drivers/vm-packer/sandboxer-guest-agent}")
ROUNDS=${3:-5}
IMAGE_DIR=${SANDBOXER_TINY_VM_DIR:-$(dirname "$BIN")/tiny-vm}
scripts/build-tiny-vm.sh "$IMAGE_DIR" "$AGENT" >&2
WORK=$(mktemp -d)
trap 'for f in "$WORK"/*/drivers/vm-packer/vms/*/qemu.pid "$WORK"/hand*/qemu.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/profiles"
sed -e "s|^  manifest: manifest.json$|  manifest: $IMAGE_DIR/manifest.json|" \
  -e "s|^  kernel: vmlinuz$|  kernel: $IMAGE_DIR/vmlinuz|" \
  -e "s|^  initrd: initrd.img$|  initrd: $IMAGE_DIR/initrd.img|" "$IMAGE_DIR/profile.yaml" \
  >"$WORK/profiles/vm.yaml"

/usr/bin/python3 - "$BIN" "$WORK" "$ROUNDS" <<'PY'
import json, os, socket, statistics, struct, subprocess, sys, time

binary, work, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]

def run(argv):
    proc = subprocess.run(sbx + argv, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"{argv} failed: {proc.stderr}")
    return proc.stdout

def agent_answers(path):
    # The agent's hello (drivers/vm-packer/agent/wire.hpp): length, type 'H', channel 0, 8 bytes.
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(0.5)
        s.connect(path)
        s.sendall(struct.pack(">IBI", 13, ord("H"), 0) + b"benchmrk")
        want = struct.pack(">IBI", 13, ord("h"), 0) + b"benchmrk"
        got = b""
        while want not in got:
            data = s.recv(4096)
            if not data:
                return False
            got += data
        return True
    except OSError:
        return False
    finally:
        s.close()

def by_hand(argv, directory):
    start = time.perf_counter()
    subprocess.run(argv, cwd=directory, check=True, timeout=60)
    while not agent_answers(os.path.join(directory, "agent0.sock")):
        time.sleep(0.01)
    took = time.perf_counter() - start
    pid = int(open(os.path.join(directory, "qemu.pid")).read())
    os.kill(pid, 9)
    return took

creates, hands, restores = [], [], []
for i in range(rounds):
    start = time.perf_counter()
    sid = run(["create", "--profile", "vm", "--quiet"]).strip()
    creates.append(time.perf_counter() - start)
    vm_dir = f"{work}/state/drivers/vm-packer/vms/{sid}"
    argv = open(f"/proc/{int(open(vm_dir + '/qemu.pid').read())}/cmdline").read().split("\0")[:-1]
    snap = json.loads(run(["snapshot", sid, "-o", "json"]))["id"]
    start = time.perf_counter()
    rid = run(["restore", snap, "--quiet"]).strip()
    restores.append(time.perf_counter() - start)
    run(["destroy", sid, rid, "--quiet"])
    # The same QEMU argv by hand, on an overlay of its own, until the agent answers.
    hand = f"{work}/hand{i}"
    os.makedirs(hand)
    ledger = json.load(open(f"{work}/state/ledger.json"))
    image = next(r["spec"]["image"] for r in ledger["sandboxes"] if r["id"] == sid)
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "qcow2", "-b", image,
                    f"{hand}/overlay.qcow2"], check=True)
    hands.append(by_hand(argv, hand))

c, h, r = statistics.median(creates), statistics.median(hands), statistics.median(restores)
print(f"rounds: {rounds} (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus, "
      f"{'KVM' if os.access('/dev/kvm', os.W_OK) else 'TCG'})")
print(f"create until exec works: sandboxer {c:.2f} s, QEMU by hand {h:.2f} s: "
      f"ratio {c / h:.2f} (target <= 1.1)")
print(f"restore from a memory checkpoint {r:.2f} s, cold boot (create) {c:.2f} s: "
      f"ratio {r / c:.2f} (target <= 0.5)")
PY
