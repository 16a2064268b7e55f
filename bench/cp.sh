#!/usr/bin/env bash
# sandboxer cp against the peer tools, in one run, alternating, on the same 200 MiB tree (2000
# small files of 25 KiB and one of 150 MiB):
#   docker:      `sandboxer cp` in and out of a docker sandbox vs `docker cp` in and out of a
#                container of the same image (target ratio <= 1.1 each way);
#   compose-ssh: `sandboxer cp` vs the same by hand, `tar -c | ssh HOST docker exec -i C tar -x`
#                and back (target <= 1.1; --compose, needs sshd and docker-compose);
#   vm-packer:   the guest agent path's throughput in MiB/s (--vm, needs the tiny VM image);
#   memory:      the peak RSS of `sandboxer cp` of a 1 GiB file in and out (it streams: flat).
# Needs a Docker Engine with sandboxer/busybox:local (scripts/start-docker.sh).
# Usage: bench/cp.sh [path/to/sandboxer] [rounds] [--compose] [--vm]
# (--vm builds the tiny VM under $BUILD/tiny-vm with $BUILD's guest agent; BUILD defaults to build.)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
ROUNDS=${2:-5}
BUILD=$(realpath "${BUILD:-build}")
shift $(($# < 2 ? $# : 2)) || true
COMPOSE=no VM=no
for arg in "$@"; do
  case $arg in --compose) COMPOSE=yes ;; --vm) VM=yes ;; esac
done
docker image inspect sandboxer/busybox:local >/dev/null
WORK=$(mktemp -d)
SSHD_PID=""
CONTAINER=""
# (throwaway-sshd sets SSHD_PID; the trap stops it.)
# Sandboxes go first, while the sshd that compose-ssh's destroy needs is still up.
trap '"$BIN" --state-dir "$WORK/state" --profiles-dir "$WORK/profiles" destroy --all --yes >/dev/null 2>&1 || true
      [ -z "$CONTAINER" ] || docker rm -f "$CONTAINER" >/dev/null 2>&1 || true
      [ -z "$SSHD_PID" ] || kill "$SSHD_PID" 2>/dev/null || true
      rm -rf "$WORK"' EXIT
. bench/lib.sh
write_docker_bench_profile "$WORK"

# The tree: many small files and one large one, bytes that do not compress.
mkdir -p "$WORK/tree/small"
head -c $((150 * 1024 * 1024)) /dev/urandom >"$WORK/tree/large.bin"
head -c $((2000 * 25 * 1024)) /dev/urandom | split -b $((25 * 1024)) -a 4 - "$WORK/tree/small/f"
head -c $((1024 * 1024 * 1024)) /dev/zero | tr '\0' 'x' >"$WORK/gib.bin"

SBX=("$BIN" --state-dir "$WORK/state" --profiles-dir "$WORK/profiles")
ID=$("${SBX[@]}" create --profile bench --quiet)
CONTAINER=$(docker run -d --stop-timeout 0 sandboxer/busybox:local sleep infinity)

/usr/bin/python3 - "$WORK" "$ROUNDS" "$ID" "$CONTAINER" "${SBX[@]}" <<'PY'
import os, resource, shutil, statistics, subprocess, sys, time

work, rounds, sandbox, container, sbx = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5:]
tree = f"{work}/tree"

def timed(argv):
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start

def clean(argv_exec, path):
    subprocess.run(argv_exec + ["rm", "-rf", path], check=True)

rows = {"in": ([], []), "out": ([], [])}
for i in range(rounds):
    # Alternate who goes first, so neither always meets a warm page cache.
    order = [("sandboxer", 0), ("docker", 1)] if i % 2 == 0 else [("docker", 1), ("sandboxer", 0)]
    for who, slot in order:
        if who == "sandboxer":
            rows["in"][0].append(timed(sbx + ["cp", "--no-progress", "-q", tree, f"{sandbox}:/in"]))
        else:
            rows["in"][1].append(timed(["docker", "cp", tree, f"{container}:/in"]))
    for who, slot in order:
        out = f"{work}/out-{who}"
        if who == "sandboxer":
            rows["out"][0].append(timed(sbx + ["cp", "--no-progress", "-q", f"{sandbox}:/in", out]))
        else:
            rows["out"][1].append(timed(["docker", "cp", f"{container}:/in", out]))
        shutil.rmtree(out)
    clean(sbx + ["exec", sandbox, "--"], "/in")
    clean(["docker", "exec", container], "/in")

print(f"docker, 200 MiB tree (150 MiB file + 2000 x 25 KiB), {rounds} rounds "
      f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
for way in ("in", "out"):
    s, d = statistics.median(rows[way][0]), statistics.median(rows[way][1])
    print(f"  cp {way:3}  sandboxer {s:6.2f} s   docker cp {d:6.2f} s   ratio {s / d:.2f}  "
          f"(target <= 1.10)  {200 / s:6.1f} MiB/s")

# Memory: one process per direction, its peak RSS as the kernel counted it.
def peak_kib(argv):
    pid = os.fork()
    if pid == 0:
        os.execvp(argv[0], argv)
    _, status, usage = os.wait4(pid, 0)
    if status != 0:
        sys.exit(f"{argv} failed")
    return usage.ru_maxrss
rss_in = peak_kib(sbx + ["cp", "--no-progress", "-q", f"{work}/gib.bin", f"{sandbox}:/gib.bin"])
rss_out = peak_kib(sbx + ["cp", "--no-progress", "-q", f"{sandbox}:/gib.bin", f"{work}/gib-back.bin"])
print(f"  1 GiB file: peak RSS {rss_in / 1024:.1f} MiB in, {rss_out / 1024:.1f} MiB out")
PY

if [ "$VM" = yes ]; then
  # vm-packer: the guest agent path (exec with stdin over virtio-serial, no guest network) on the
  # tiny VM under TCG: the small files and 48 MiB of the large one, as its disk is 256 MiB.
  VMDIR=$BUILD/tiny-vm
  scripts/build-tiny-vm.sh "$VMDIR" "$BUILD/drivers/vm-packer/sandboxer-guest-agent" >&2
  sed -e "s|^  manifest: manifest.json$|  manifest: $VMDIR/manifest.json|" \
    -e "s|^  kernel: vmlinuz$|  kernel: $VMDIR/vmlinuz|" \
    -e "s|^  initrd: initrd.img$|  initrd: $VMDIR/initrd.img|" "$VMDIR/profile.yaml" >"$WORK/profiles/vm.yaml"
  mkdir -p "$WORK/vmtree/small"
  head -c $((48 * 1024 * 1024)) "$WORK/tree/large.bin" >"$WORK/vmtree/large.bin"
  cp "$WORK/tree/small/"fa* "$WORK/vmtree/small/"
  VID=$("${SBX[@]}" create --profile vm --quiet)
  /usr/bin/python3 - "$WORK" "$ROUNDS" "$VID" "${SBX[@]}" <<'PY'
import os, shutil, statistics, subprocess, sys, time

work, rounds, sandbox, sbx = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
tree = f"{work}/vmtree"
mib = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tree) for f in fs) / 2**20
files = sum(len(fs) for _, _, fs in os.walk(tree))

def timed(argv):
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start

ins, outs = [], []
for _ in range(rounds):
    ins.append(timed(sbx + ["cp", "--no-progress", "-q", tree, f"{sandbox}:/tmp/t"]))
    outs.append(timed(sbx + ["cp", "--no-progress", "-q", f"{sandbox}:/tmp/t", f"{work}/vm-back"]))
    subprocess.run(sbx + ["exec", sandbox, "--", "rm", "-rf", "/tmp/t"], check=True)
    shutil.rmtree(f"{work}/vm-back")
print(f"vm-packer (tiny VM, TCG, guest agent), {mib:.0f} MiB tree ({files} files), {rounds} rounds")
for way, times in (("in", ins), ("out", outs)):
    t = statistics.median(times)
    print(f"  cp {way:3}  sandboxer {t:6.2f} s   {mib / t:6.1f} MiB/s")
PY
  "${SBX[@]}" destroy "$VID" >/dev/null
fi

[ "$COMPOSE" = yes ] || exit 0
# compose-ssh: the same tree through ssh, against tar piped through ssh by hand.
eval "$(scripts/throwaway-sshd.sh "$WORK/ssh")"
cat >"$WORK/profiles/one.yml" <<'YAML'
services:
  box: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
YAML
write_compose_bench_profile "$WORK" compose one.yml
CID=$("${SBX[@]}" create --profile compose --quiet)
PROJECT=$("${SBX[@]}" status "$CID" -o json | jq -r .backend_id)
BOX=$(docker ps -q --filter "label=com.docker.compose.project=$PROJECT")
/usr/bin/python3 - "$WORK" "$ROUNDS" "$CID" "$BOX" "$SSH_PORT" "$SSH_USER" "${SBX[@]}" <<'PY'
import os, shutil, statistics, subprocess, sys, time

work, rounds, sandbox, box, port, user, sbx = (sys.argv[1], int(sys.argv[2]), sys.argv[3],
                                               sys.argv[4], sys.argv[5], sys.argv[6], sys.argv[7:])
ssh = ["ssh", "-o", "BatchMode=yes", "-o", f"UserKnownHostsFile={work}/ssh/known_hosts",
       "-i", f"{work}/ssh/client_key", "-o", "IdentitiesOnly=yes", "-p", port, f"{user}@127.0.0.1"]

def timed(script):
    start = time.perf_counter()
    subprocess.run(script, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start

def pipe(left, right):
    # left | right, without a shell
    a = subprocess.Popen(left, stdout=subprocess.PIPE)
    b = subprocess.Popen(right, stdin=a.stdout)
    a.stdout.close()
    if b.wait() or a.wait():
        sys.exit(f"{left} | {right} failed")

rows = {"in": ([], []), "out": ([], [])}
for i in range(rounds):
    rows["in"][0].append(timed(sbx + ["cp", "--no-progress", "-q", f"{work}/tree", f"{sandbox}:/"]))
    rows["out"][0].append(timed(sbx + ["cp", "--no-progress", "-q", f"{sandbox}:/tree", f"{work}/o1"]))
    subprocess.run(sbx + ["exec", sandbox, "--", "rm", "-rf", "/tree"], check=True)
    shutil.rmtree(f"{work}/o1")
    start = time.perf_counter()
    pipe(["tar", "-c", "-f", "-", "-C", work, "tree"],
         ssh + ["docker", "exec", "-i", box, "tar", "-x", "-f", "-", "-C", "/"])
    rows["in"][1].append(time.perf_counter() - start)
    os.mkdir(f"{work}/o2")
    start = time.perf_counter()
    pipe(ssh + ["docker", "exec", box, "tar", "-c", "-f", "-", "-C", "/", "tree"],
         ["tar", "-x", "-f", "-", "-C", f"{work}/o2"])
    rows["out"][1].append(time.perf_counter() - start)
    subprocess.run(ssh + ["docker", "exec", box, "rm", "-rf", "/tree"], check=True)
    shutil.rmtree(f"{work}/o2")
print(f"compose-ssh, the same tree, {rounds} rounds")
for way in ("in", "out"):
    s, d = statistics.median(rows[way][0]), statistics.median(rows[way][1])
    print(f"  cp {way:3}  sandboxer {s:6.2f} s   ssh+tar by hand {d:6.2f} s   ratio {s / d:.2f}  "
          f"(target <= 1.10)")
PY
