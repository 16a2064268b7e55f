#!/usr/bin/env bash
# Pause and resume against their peers, in one run (docs/pause.md, "Speed"):
#   1. docker: `sandboxer pause A && sandboxer resume A` against `docker pause B && docker unpause
#      B`, alternating, on two sandboxes of the same profile (target ratio <= 1.1);
#   2. vm-packer (when SANDBOXER_TINY_VM_DIR names the tiny VM image and qemu is there): a resume to
#      a ready guest agent against a cold create to the same readiness (target <= 0.5), and what a
#      paused VM holds: its QEMU process is gone (no RAM), the checkpoint's bytes on disk.
# Needs a Docker Engine with sandboxer/busybox:local (scripts/start-docker.sh).
# Usage: bench/pause.sh [path/to/sandboxer] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
ROUNDS=${2:-20}
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
SBX=("$BIN" --state-dir "$WORK/state" --profiles-dir "$WORK/profiles")
trap '"${SBX[@]}" destroy --all --yes >/dev/null 2>&1 || true; rm -rf "$WORK"' EXIT
. bench/lib.sh
write_docker_bench_profile "$WORK"
"${SBX[@]}" create --profile bench --name ours --quiet >/dev/null
"${SBX[@]}" create --profile bench --name theirs --quiet >/dev/null
THEIRS=$("${SBX[@]}" status theirs -o json | jq -r .backend_id)

/usr/bin/python3 - "$ROUNDS" "$THEIRS" "${SBX[@]}" <<'PY'
import os, statistics, subprocess, sys, time
rounds, theirs, sbx = int(sys.argv[1]), sys.argv[2], sys.argv[3:]

def timed(*argvs):
    start = time.perf_counter()
    for argv in argvs:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start

ours, peer = [], []
for i in range(rounds):
    pair = [("s", (sbx + ["pause", "ours"], sbx + ["resume", "ours"])),
            ("d", (["docker", "pause", theirs], ["docker", "unpause", theirs]))]
    for who, argvs in (pair if i % 2 == 0 else pair[::-1]):
        (ours if who == "s" else peer).append(timed(*argvs))
s, d = statistics.median(ours), statistics.median(peer)
print(f"docker pause+resume, {rounds} rounds (load average {os.getloadavg()[0]:.1f} on "
      f"{os.cpu_count()} cpus)")
print(f"  sandboxer {s:6.3f} s (min {min(ours):.3f})   docker pause+unpause {d:6.3f} s "
      f"(min {min(peer):.3f})   ratio {s / d:.2f}  (target <= 1.10)")
PY

if [ -n "${SANDBOXER_TINY_VM_DIR:-}" ] && [ -f "$SANDBOXER_TINY_VM_DIR/profile.yaml" ] &&
  command -v qemu-system-x86_64 >/dev/null; then
  dir=$SANDBOXER_TINY_VM_DIR
  # The tiny image's own profile, its files made absolute (as tests/e2e/lib.sh's tiny_vm_profile).
  sed -e "s|^  manifest: manifest.json$|  manifest: $dir/manifest.json|" \
    -e "s|^  kernel: vmlinuz$|  kernel: $dir/vmlinuz|" \
    -e "s|^  initrd: initrd.img$|  initrd: $dir/initrd.img|" "$dir/profile.yaml" >"$WORK/profiles/vm.yaml"
  /usr/bin/python3 - "$WORK/state" "${SBX[@]}" <<'PY'
import json, os, statistics, subprocess, sys, time
state, sbx = sys.argv[1], sys.argv[2:]

def run(*args):
    return subprocess.run(sbx + list(args), check=True, capture_output=True, text=True).stdout

def timed(*steps):
    start = time.perf_counter()
    for step in steps:
        run(*step)
    return time.perf_counter() - start

cold, warm, held = [], [], []
for i in range(3):
    name = f"vm{i}"
    # Both end when the guest agent answers an exec: the same readiness.
    cold.append(timed(("create", "--profile", "vm", "--name", name, "--quiet"), ("exec", name, "--", "true")))
    vm_id = json.loads(run("status", name, "-o", "json"))["id"]
    run("pause", name)
    qemu = subprocess.run(["pgrep", "-f", f"-name {vm_id} "], capture_output=True, text=True).stdout.split()
    vm_dir = os.path.join(state, "drivers", "vm-packer", "vms", vm_id)
    disk = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(vm_dir) for f in files)
    held.append((len(qemu), disk))
    warm.append(timed(("resume", name), ("exec", name, "--", "true")))
    run("destroy", name)
c, w = statistics.median(cold), statistics.median(warm)
print(f"vm-packer (TCG), 3 rounds: cold create to agent-ready {c:6.2f} s   resume to agent-ready "
      f"{w:6.2f} s   ratio {w / c:.2f}  (target <= 0.50)")
print(f"  while paused: {max(q for q, _ in held)} QEMU process(es) (host RAM held: none beyond "
      f"files); the VM's directory holds {max(d for _, d in held) / 2**20:.0f} MiB on disk "
      f"(overlay with the checkpoint)")
PY
fi
