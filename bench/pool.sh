#!/usr/bin/env bash
# Warm pools (docs/pools.md, "Speed"), in one run:
#   1. docker: `create` claiming a pool's member against a cold `create --no-pool`, alternating,
#      same profile (target ratio <= 0.1), with the claim's default check (status and a no-op
#      exec) and with `pool: {probe: status}`;
#   2. vm-packer on the tiny image (scripts/build-tiny-vm.sh), when qemu and the guest agent are
#      here: the same (target <= 0.05);
#   3. the claim's latency on the PostgreSQL ledger (a throwaway cluster) with 3 simulated machines
#      (own --state-dir and SANDBOXER_HOST, as bench/fleet.sh) claiming at once from one pool of 3
#      (stub driver with a shared root: a remote backend, one pool for the fleet): median and p95,
#      and one machine alone for reference.
# Each sample fills the pool first (not timed), times the create, then destroys what it made (not
# timed). A claim that came back cold, or a cold create that claimed, ends the bench: its time
# would mean nothing.
# Needs a Docker Engine with sandboxer/busybox:local (scripts/start-docker.sh); part 3 needs root,
# Debian's postgresql and psql (scripts/throwaway-postgres.sh), else it says it was skipped.
# Usage: bench/pool.sh [path/to/sandboxer] [rounds]   (rounds: docker and PostgreSQL; vm: 3)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
ROUNDS=${2:-20}
AGENT=${SANDBOXER_GUEST_AGENT:-$(dirname "$BIN")/drivers/vm-packer/sandboxer-guest-agent}
IMAGE_DIR=${SANDBOXER_TINY_VM_DIR:-$(dirname "$BIN")/tiny-vm}
docker image inspect sandboxer/busybox:local >/dev/null
# Nothing of the caller's environment may pick the ledger or add event sinks.
unset SANDBOXER_LEDGER SANDBOXER_HOST SANDBOXER_FAKE_NOW SANDBOXER_STATE_DIR
WORK=$(mktemp -d)
: >"$WORK/config.yaml"
export SANDBOXER_CONFIG=$WORK/config.yaml
PG_DIR=$WORK/pg
PG_PID=""
cleanup() {
  local rc=$?
  "$BIN" --state-dir "$WORK/state" destroy --all --yes >/dev/null 2>&1 || true
  for f in "$WORK"/state/drivers/vm-packer/vms/*/qemu.pid; do
    [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
  done
  stop_postgres_and_work
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
. bench/lib.sh
write_docker_bench_profile "$WORK"
cp "$WORK/profiles/bench.yaml" "$WORK/profiles/bench-status.yaml"
printf 'pool: { size: 1, max_age: 1h }\n' >>"$WORK/profiles/bench.yaml"
printf 'pool: { size: 1, max_age: 1h, probe: status }\n' >>"$WORK/profiles/bench-status.yaml"

# warm_vs_cold PROFILE ROUNDS TARGET: the comparison of parts 1 and 2, on the local files.
cat >"$WORK/warm_vs_cold.py" <<'PY'
import json, os, statistics, subprocess, sys, time

binary, work, profile, rounds, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]

def run(*args):
    proc = subprocess.run(sbx + list(args), capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return proc.stdout

def timed_create(*extra):
    start = time.perf_counter()
    out = run("create", "--profile", profile, "-o", "json", *extra)
    return time.perf_counter() - start, json.loads(out)

warm, cold = [], []
for i in range(rounds):
    # Alternating which goes first: a drift of the machine weighs on both alike.
    for kind in (("warm", "cold") if i % 2 == 0 else ("cold", "warm")):
        if kind == "warm":
            run("pool", "fill", "--profile", profile, "--quiet")
            seconds, made = timed_create()
            if not (made.get("pool") or {}).get("claimed_by"):
                sys.exit(f"FAIL: a create after a fill did not claim: {made}")
            warm.append(seconds)
        else:
            seconds, made = timed_create("--no-pool")
            if made.get("pool"):
                sys.exit(f"FAIL: create --no-pool claimed: {made}")
            cold.append(seconds)
        run("destroy", made["id"], "--quiet")
run("destroy", "--all", "--yes", "--quiet")  # the member of the last fill, if any is left
w, c = statistics.median(warm), statistics.median(cold)
ratio = w / c
print(f"{profile}: {rounds} rounds (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
print(f"  create claiming a member: median {w * 1000:8.1f} ms (min {min(warm) * 1000:.1f}, max {max(warm) * 1000:.1f})")
print(f"  cold create (--no-pool):  median {c * 1000:8.1f} ms (min {min(cold) * 1000:.1f}, max {max(cold) * 1000:.1f})")
print(f"  ratio {ratio:.3f}  (target <= {target}: {'met' if ratio <= target else 'NOT met'})")
PY

echo "1. docker, the claim checked by status and a no-op exec (pool.probe: exec, the default)"
/usr/bin/python3 "$WORK/warm_vs_cold.py" "$BIN" "$WORK" bench "$ROUNDS" 0.1
echo "1b. docker, the claim checked by status alone (pool.probe: status)"
/usr/bin/python3 "$WORK/warm_vs_cold.py" "$BIN" "$WORK" bench-status "$ROUNDS" 0.1
echo

echo "2. vm-packer"
if command -v qemu-system-x86_64 >/dev/null && [ -x "$AGENT" ]; then
  scripts/build-tiny-vm.sh "$IMAGE_DIR" "$AGENT" >/dev/null 2>&1 ||
    { echo "FAIL: the tiny VM image did not build (scripts/build-tiny-vm.sh)" >&2; exit 1; }
  {
    sed -e "s|^  manifest: manifest.json$|  manifest: $IMAGE_DIR/manifest.json|" \
      -e "s|^  kernel: vmlinuz$|  kernel: $IMAGE_DIR/vmlinuz|" \
      -e "s|^  initrd: initrd.img$|  initrd: $IMAGE_DIR/initrd.img|" "$IMAGE_DIR/profile.yaml"
    printf 'pool: { size: 1, max_age: 1h }\n'
  } >"$WORK/profiles/vm.yaml"
  # What the profile's accel: auto picks (drivers/vm-packer/accel.cpp).
  if [ -w /dev/kvm ] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
    echo "  accel: KVM"
  else
    echo "  accel: TCG (emulation: no usable /dev/kvm, or a CPU without vmx/svm)"
  fi
  /usr/bin/python3 "$WORK/warm_vs_cold.py" "$BIN" "$WORK" vm 3 0.05
else
  echo "  skipped: qemu-system-x86_64 or the guest agent ($AGENT) is missing"
fi
echo

echo "3. claim latency on PostgreSQL, 3 machines at once"
rc=0
chmod 711 "$WORK" # the server runs as postgres: it passes through, never reads
vars=$(scripts/throwaway-postgres.sh start "$PG_DIR" 2>"$WORK/pg.err") || rc=$?
if [ "$rc" = 125 ]; then
  echo "  skipped: $(cat "$WORK/pg.err")"
  exit 0
fi
[ "$rc" = 0 ] || { echo "FAIL: the throwaway PostgreSQL did not start: $(cat "$WORK/pg.err")" >&2; exit 1; }
eval "$vars" # PG_URL PG_PID PG_PASSFILE ...
# shellcheck disable=SC2153 # assigned by the eval above
export PGPASSFILE=$PG_PASSFILE
printf 'driver: stub\nttl: { default: 30m }\npool: { size: 3, max_age: 1h }\nstub:\n  root: %s\n  latency: { create: 1ms, destroy: 1ms }\n' \
  "$WORK/backend" >"$WORK/profiles/fleet.yaml"
for m in m1 m2 m3; do mkdir -m 700 "$WORK/$m"; done
SANDBOXER_LEDGER=$PG_URL SANDBOXER_HOST=m1 "$BIN" --state-dir "$WORK/m1" ledger migrate >/dev/null 2>&1

/usr/bin/python3 - "$BIN" "$WORK" "$PG_URL" "$ROUNDS" <<'PY'
import json, os, statistics, subprocess, sys, threading, time

binary, work, url, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
machines = ["m1", "m2", "m3"]

def sbx(machine, *args):
    argv = [binary, "--state-dir", f"{work}/{machine}", "--profiles-dir", f"{work}/profiles", *args]
    env = dict(os.environ, SANDBOXER_LEDGER=url, SANDBOXER_HOST=machine)
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"FAIL: {machine}: {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()}")
    return seconds, proc.stdout

def claim(machine, into):
    seconds, out = sbx(machine, "create", "--profile", "fleet", "-o", "json")
    into.append((machine, seconds, json.loads(out)))

def sample(claimers):
    sbx("m1", "pool", "fill", "--profile", "fleet", "--quiet")
    made = []
    threads = [threading.Thread(target=claim, args=(m, made)) for m in claimers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if len(made) != len(claimers):
        sys.exit("FAIL: a claimer failed (see above)")
    for machine, _, record in made:
        if not (record.get("pool") or {}).get("claimed_by"):
            sys.exit(f"FAIL: {machine} did not claim from a pool of 3: {record}")
    if len({record["id"] for _, _, record in made}) != len(made):
        sys.exit(f"FAIL: one member claimed twice: {[r['id'] for _, _, r in made]}")
    for machine, _, record in made:
        sbx(machine, "destroy", record["id"], "--quiet")
    return [seconds for _, seconds, _ in made]

for _ in range(3):  # warm-up: the connection keepers, the page cache
    sample(machines)
alone, together = [], []
for i in range(rounds):
    alone += sample(["m1"])
    together += sample(machines)
sbx("m1", "destroy", "--all", "--yes", "--quiet")

def p95(values):
    values = sorted(values)
    return values[min(len(values) - 1, round(0.95 * (len(values) - 1)))]

print(f"  {rounds} rounds (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus); each "
      f"claim checked: a member, each to one create")
print(f"  1 machine alone:    median {statistics.median(alone) * 1000:7.1f} ms   p95 "
      f"{p95(alone) * 1000:7.1f} ms   ({len(alone)} claims)")
print(f"  3 machines at once: median {statistics.median(together) * 1000:7.1f} ms   p95 "
      f"{p95(together) * 1000:7.1f} ms   ({len(together)} claims)")
PY
