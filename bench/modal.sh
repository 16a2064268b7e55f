#!/usr/bin/env bash
# The modal driver's own cost, in one run:
# 1. startup: `sandboxer --version` and `sandboxer list` as built (gRPC in the embedded module,
#    loaded only by Modal commands) against the same with libgrpc++ preloaded, i.e. what linking
#    gRPC into the executable would add to every command (--version also loads libcurl, whose
#    version it prints; list does not);
# 2. create, exec and destroy against tests/fake_modal: the driver's time (sandboxer's own
#    "timing: driver call" line) minus the fake's time handling the calls (its call log), per call
#    (target < 5 ms per call beyond the server's time).
# Usage: bench/modal.sh [path/to/sandboxer] [path/to/sandboxer-fake-modal] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(realpath "${1:-build/sandboxer}")
FAKE=$(realpath "${2:-build/tests/sandboxer-fake-modal}")
ROUNDS=${3:-10}
WORK=$(mktemp -d)
FAKE_PID=""
trap '[ -z "$FAKE_PID" ] || kill "$FAKE_PID" 2>/dev/null; rm -rf "$WORK"' EXIT
export MODAL_TOKEN_ID="ak-bench$RANDOM$RANDOM" MODAL_TOKEN_SECRET="as-bench$RANDOM$RANDOM"
# One poll for the task and none for the build: the driver's own sleeps are not its overhead.
FAKE_MODAL_TOKEN_ID=$MODAL_TOKEN_ID FAKE_MODAL_TOKEN_SECRET=$MODAL_TOKEN_SECRET \
  "$FAKE" --state-dir "$WORK/fake" --task-polls 1 --build-polls 0 >"$WORK/fake.out" 2>&1 &
FAKE_PID=$!
for _ in $(seq 100); do grep -q '^PORT=' "$WORK/fake.out" && break; sleep 0.1; done
PORT=$(sed -n 's/^PORT=//p' "$WORK/fake.out")
mkdir -p "$WORK/profiles"
cat >"$WORK/profiles/bench.yaml" <<YAML
driver: modal
ttl: { default: 30m }
secrets: { token_id: { env: MODAL_TOKEN_ID }, token_secret: { env: MODAL_TOKEN_SECRET } }
modal: { image: debian:12, server_url: "http://127.0.0.1:$PORT", timeout: 1h }
YAML
GRPC=$(ldconfig -p | awk '/libgrpc\+\+\.so\.[0-9]/ {print $NF; exit}')

/usr/bin/python3 - "$BIN" "$WORK" "$ROUNDS" "$GRPC" <<'PY'
import json, os, re, statistics, subprocess, sys, time

binary, work, rounds, grpc = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sbx = [binary, "--state-dir", f"{work}/state", "--profiles-dir", f"{work}/profiles"]
calls_log = f"{work}/fake/calls.jsonl"

def startup(argv, env=None, n=100):
    for _ in range(5):  # warm the page cache: the first runs measure the disk
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
    times = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=False)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)

def calls_since(offset):
    with open(calls_log) as f:
        f.seek(offset)
        lines = [json.loads(l) for l in f if l.strip()]
    return lines

def driver_ms(stderr):
    found = re.findall(r"timing: driver call ([0-9.]+) ms", stderr)
    return sum(float(x) for x in found)

def measured(argv):
    offset = os.path.getsize(calls_log) if os.path.exists(calls_log) else 0
    start = time.perf_counter()
    proc = subprocess.run(sbx + ["-v"] + argv, capture_output=True, text=True, timeout=120)
    wall = (time.perf_counter() - start) * 1000
    if proc.returncode != 0:
        sys.exit(f"{argv} failed: {proc.stderr}")
    calls = calls_since(offset)
    server = sum(c["ms"] for c in calls)
    return proc.stdout, wall, driver_ms(proc.stderr), server, len(calls)

env = dict(os.environ)
preloaded = dict(env, LD_PRELOAD=grpc)
for name, argv in [("--version", [binary, "--version"]), ("list", sbx + ["list"])]:
    plain, linked = startup(argv, env), startup(argv, preloaded)
    print(f"sandboxer {name:9}: {plain:6.1f} ms as built, {linked:6.1f} ms with gRPC loaded at start "
          f"(+{linked - plain:.1f} ms, ratio {linked / plain:.2f})")

rows = {"create": [], "exec": [], "destroy": []}
measured(["create", "--profile", "bench", "--quiet"])  # builds the image once; not counted
for _ in range(rounds):
    out, wall, drv, srv, n = measured(["create", "--profile", "bench", "--quiet"])
    sid = out.strip()
    rows["create"].append((wall, drv, srv, n))
    rows["exec"].append(measured(["exec", sid, "--", "true"])[1:])
    rows["destroy"].append(measured(["destroy", sid, "--quiet"])[1:])
print(f"rounds: {rounds}   (load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus)")
for verb, samples in rows.items():
    wall = statistics.median(s[0] for s in samples)
    drv = statistics.median(s[1] for s in samples)
    srv = statistics.median(s[2] for s in samples)
    n = statistics.median(s[3] for s in samples)
    per_call = (drv - srv) / n if n else float("nan")
    print(f"{verb:8} wall {wall:6.1f} ms, driver {drv:6.1f} ms, fake {srv:6.1f} ms over {n:.0f} calls: "
          f"{per_call:5.2f} ms per call beyond the server (target < 5)")
PY
