#!/usr/bin/env bash
# What lifecycle events cost a command: stub create+destroy with no sinks against the same with a
# jsonl sink and an http sink (the test hub on loopback), alternating, N pairs in one run; prints
# the median wall time of each and their ratio, and the outbox writes per event.
# Usage: bench/events.sh [path/to/sandboxer] [pairs]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
PAIRS=${2:-20}
WORK=$(mktemp -d)
python3 tests/event_receiver/receiver.py "$WORK/port" "$WORK/hub.jsonl" token &
HUB=$!
trap 'kill $HUB 2>/dev/null; rm -rf "$WORK"' EXIT
for _ in $(seq 100); do [ -e "$WORK/port" ] && break; sleep 0.05; done
mkdir -p "$WORK/profiles"
printf 'driver: stub\nttl: 30m\nstub: { root: %s/backend }\n' "$WORK" >"$WORK/profiles/bench.yaml"
cat >"$WORK/with-sinks.yaml" <<EOF2
events:
  - { type: jsonl, path: "$WORK/events.jsonl" }
  - { type: http, url: "http://127.0.0.1:$(cat "$WORK/port")/events" }
EOF2
: >"$WORK/no-sinks.yaml"

python3 - "$BIN" "$WORK" "$PAIRS" <<'PY'
import os, statistics, subprocess, sys, time

binary, work, pairs = sys.argv[1], sys.argv[2], int(sys.argv[3])

def lifecycle(config):
    env = dict(os.environ, SANDBOXER_CONFIG=f"{work}/{config}.yaml")
    sbx = [binary, "--state-dir", f"{work}/state-{config}", "--profiles-dir", f"{work}/profiles"]
    start = time.perf_counter()
    sid = subprocess.run(sbx + ["create", "--profile", "bench", "--quiet"], env=env, check=True,
                         capture_output=True, text=True).stdout.strip()
    subprocess.run(sbx + ["destroy", sid, "--quiet"], env=env, check=True, capture_output=True)
    return (time.perf_counter() - start) * 1000

for config in ("no-sinks", "with-sinks"):  # warm-up: ledger files, page cache, libcurl
    lifecycle(config)
plain, sinks = [], []
for _ in range(pairs):
    plain.append(lifecycle("no-sinks"))
    sinks.append(lifecycle("with-sinks"))
a, b = statistics.median(plain), statistics.median(sinks)
events = sum(1 for _ in open(f"{work}/events.jsonl"))
hub = sum(1 for _ in open(f"{work}/hub.jsonl"))
print(f"create+destroy, stub driver, {pairs} pairs alternating (median wall time)")
print(f"  no sinks:              {a:7.1f} ms")
print(f"  jsonl + http sinks:    {b:7.1f} ms   ratio {b / a:.2f}   (+{b - a:.1f} ms for 4 events)")
print(f"  events delivered: jsonl {events}, hub {hub} (4 per lifecycle)")
print(f"  load average: {os.getloadavg()[0]:.2f}")
PY
