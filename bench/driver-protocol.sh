#!/usr/bin/env bash
# What the driver protocol costs: the same driver (stub) in-process and as an external program
# (sandboxer-driver-stub-external, the stub served by the C++ SDK), alternating, N rounds in one
# run. Two commands: `profiles validate` (the handshake and one call: validate) and `exec` (the
# handshake and exec with its output notifications). Prints the median wall time of each and the
# difference, which docs/driver-protocol.md promises stays within 15 ms.
# Usage: bench/driver-protocol.sh [path/to/sandboxer] [rounds] [path/to/sandboxer-driver-stub-external]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
ROUNDS=${2:-30}
EXTERNAL=$(realpath "${3:-build/tests/sandboxer-driver-stub-external}")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/profiles"
printf 'driver: stub\nstub: { root: %s/in }\n' "$WORK" >"$WORK/profiles/in.yaml"
printf 'driver: stub-external\nstub-external: { root: %s/ext }\n' "$WORK" >"$WORK/profiles/ext.yaml"

/usr/bin/python3 - "$BIN" "$WORK" "$ROUNDS" "$(dirname "$EXTERNAL")" <<'PY'
import os, statistics, subprocess, sys, time

binary, work, rounds, driver_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
env = dict(os.environ, SANDBOXER_DRIVER_PATH=driver_dir)
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]

def timed(args):
    start = time.perf_counter()
    subprocess.run(sbx + args, env=env, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000

ids = {}
for profile in ("in", "ext"):
    ids[profile] = subprocess.run(sbx + ["create", "--profile", profile, "--quiet"], env=env,
                                  check=True, capture_output=True, text=True).stdout.strip()
results = {}
for what, args in (("validate", lambda p: ["profiles", "validate", f"{work}/profiles/{p}.yaml"]),
                   ("exec", lambda p: ["exec", ids[p], "--", "true"])):
    for p in ("in", "ext"):  # warm-up
        timed(args(p))
    samples = {"in": [], "ext": []}
    for _ in range(rounds):
        for p in ("in", "ext"):
            samples[p].append(timed(args(p)))
    results[what] = {p: statistics.median(v) for p, v in samples.items()}
for p in ("in", "ext"):
    subprocess.run(sbx + ["destroy", ids[p], "--quiet"], env=env, check=True, capture_output=True)

print(f"driver protocol overhead, median of {rounds} runs each (stub in-process vs the same stub external)")
print(f"{'command':<30} {'in-process':>12} {'external':>12} {'overhead':>10} {'ratio':>7}")
worst = 0.0
for what, label in (("validate", "profiles validate (handshake+1)"), ("exec", "exec -- true")):
    r = results[what]
    overhead = r["ext"] - r["in"]
    worst = max(worst, overhead)
    print(f"{label:<30} {r['in']:>10.1f}ms {r['ext']:>10.1f}ms {overhead:>8.1f}ms {r['ext'] / r['in']:>6.2f}x")
print(f"worst overhead {worst:.1f} ms (budget 15 ms): {'within' if worst <= 15 else 'OVER'}")
PY
