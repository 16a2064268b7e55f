#!/usr/bin/env bash
# What the fleet ledger (PostgreSQL, docs/fleet.md) costs against the local files, stub driver, on
# a throwaway cluster (scripts/throwaway-postgres.sh), in one run:
#   1. create+destroy, alternating the stores, N pairs (FLEET_BENCH_CREATES, default 100): mean and
#      median of a pair on each, their ratio PG/local (target <= 1.5: one connection per command,
#      prepared statements, few round trips), and `list` of a ledger with no live record: what
#      any command pays for its ledger before doing anything; PostgreSQL both as a machine runs it
#      (its connection keeper lends each command a session) and with every command connecting
#      itself (ledger.keep_connections: 0);
#   2. `list` and `list -o json` of N live records (FLEET_BENCH_LIST, default 10000) on each store,
#      and their ratio;
#   3. reap of N expired sandboxes (FLEET_BENCH_REAP, default 1000) by 1 reaper and by 3 reapers
#      at once on 3 simulated machines on PostgreSQL, and by 1 on the local files for reference;
#      each run must destroy every sandbox exactly once (checked on the ledger's export and on the
#      backend), else the bench fails.
# Simulated machines are what tests/e2e/test_fleet_pg.sh runs: an own --state-dir and
# $SANDBOXER_HOST each, one database, the stub with a shared root (any machine reaps any record).
# Each part has its own database, so that one part's records do not weigh on the next.
# Needs root (initdb runs as the postgres user), Debian's postgresql, psql and jq.
# Usage: bench/fleet.sh
#   $SANDBOXER            the binary (default build/sandboxer)
#   $SANDBOXER_TESTCLOCK  the test build, which honours SANDBOXER_FAKE_NOW (reap; default
#                         build/tests/sandboxer-testclock)
#   FLEET_BENCH_CREATES=20 FLEET_BENCH_LIST=1000 FLEET_BENCH_REAP=100 bench/fleet.sh  # a quick run
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
export PYTHONPATH=$PWD/bench # fleet_timed.py, shared by the Python parts below
BIN=$(realpath "${SANDBOXER:-build/sandboxer}")
TESTCLOCK=$(realpath "${SANDBOXER_TESTCLOCK:-build/tests/sandboxer-testclock}")
CREATES=${FLEET_BENCH_CREATES:-100}
LIST=${FLEET_BENCH_LIST:-10000}
REAP=${FLEET_BENCH_REAP:-1000}
PARALLEL=${FLEET_BENCH_REAP_PARALLEL:-4} # reap --parallel of every reaper
for tool in jq psql; do
  command -v "$tool" >/dev/null || { echo "fleet.sh: $tool is missing" >&2; exit 1; }
done
for binary in "$BIN" "$TESTCLOCK"; do
  [ -x "$binary" ] || { echo "fleet.sh: no binary at $binary" >&2; exit 1; }
done

WORK=$(mktemp -d)
PG_DIR=$WORK/pg
PG_PID=""
REAPERS=() # background reapers of part 3, stopped (by pid) if the bench is interrupted
cleanup() {
  local rc=$?
  for pid in "${REAPERS[@]}"; do kill "$pid" 2>/dev/null || true; done
  stop_postgres_and_work
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
fail() { echo "FAIL: $*" >&2; exit 1; }
now_ms() { date +%s%3N; }

# Nothing of the caller's environment may pick the ledger or add event sinks: the local store is
# the default (no $SANDBOXER_LEDGER), the PostgreSQL one is named per command.
unset SANDBOXER_LEDGER SANDBOXER_HOST SANDBOXER_FAKE_NOW SANDBOXER_STATE_DIR
: >"$WORK/config.yaml"
export SANDBOXER_CONFIG=$WORK/config.yaml

# The server runs as postgres: it must pass through (not read) this private directory.
chmod 711 "$WORK"
vars=$(scripts/throwaway-postgres.sh start "$PG_DIR") || fail "the throwaway PostgreSQL did not start"
eval "$vars" # PG_URL PG_PID PG_PASSFILE ...
# shellcheck disable=SC2153 # assigned by the eval above
export PGPASSFILE=$PG_PASSFILE
# db NAME: the URI of a fresh database NAME (PG_URL names the database "postgres").
db() {
  # shellcheck disable=SC2153 # PG_URL: assigned by the eval above
  psql "$PG_URL" -XAtq -c "CREATE DATABASE $1" >/dev/null
  echo "${PG_URL%/*}/$1"
}

# One profile per backend root: the stub with a shared root is reachable from every simulated
# machine (no home_host), and each part (and each reap run) has its own, so that a reap finds only
# its own sandboxes. 1ms latencies: the driver is not what is measured.
mkdir -p "$WORK/profiles"
for p in cd list reap-local reap-pg1 reap-pg3; do
  printf 'driver: stub\nttl: { default: 30m, max: 4h }\nlabels: { team: bench }\nstub:\n  root: %s\n  latency: { create: 1ms, destroy: 1ms }\n' \
    "$WORK/backend-$p" >"$WORK/profiles/$p.yaml"
done

echo "PostgreSQL $(psql "$PG_URL" -XAtq -c 'SHOW server_version') on 127.0.0.1 (throwaway, default settings), $(nproc) CPUs"
echo

# --- 1. create+destroy ----------------------------------------------------------------------------
CD_URL=$(db cd)
SANDBOXER_LEDGER=$CD_URL "$BIN" --state-dir "$WORK/cd-m1" ledger migrate >/dev/null 2>&1
printf 'ledger: { keep_connections: 0 }\n' >"$WORK/no-keeper.yaml"

/usr/bin/python3 - "$BIN" "$WORK" "$CD_URL" "$CREATES" <<'PY'
import statistics, sys
from fleet_timed import make_timed

binary, work, url, pairs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
stores = {
    "local": ({}, f"{work}/cd-local"),
    "postgresql": ({"SANDBOXER_LEDGER": url, "SANDBOXER_HOST": "m1"}, f"{work}/cd-m1"),
    # Every command connects itself: what a machine pays without its connection keeper.
    "pg, no keeper": ({"SANDBOXER_LEDGER": url, "SANDBOXER_HOST": "m1",
                       "SANDBOXER_CONFIG": f"{work}/no-keeper.yaml"}, f"{work}/cd-m1-direct"),
}

timed = make_timed(binary, stores, ["--profiles-dir", f"{work}/profiles"])

def pair(store):
    create_ms, out = timed(store, "create", "--profile", "cd", "--quiet")
    destroy_ms, _ = timed(store, "destroy", out.strip(), "--quiet")
    return create_ms, destroy_ms

for store in stores:  # warm-up: the page cache, the stores' files and tables
    for _ in range(3):
        pair(store)
creates = {s: [] for s in stores}
destroys = {s: [] for s in stores}
for i in range(pairs):
    # Alternating which store goes first: a drift of the machine weighs on both alike.
    for store in (list(stores) if i % 2 == 0 else list(reversed(list(stores)))):
        c, d = pair(store)
        creates[store].append(c)
        destroys[store].append(d)
# The floor under every command: start, open the ledger, read it (no live record is left).
empty = {s: statistics.median(timed(s, "list", "--quiet")[0] for _ in range(20)) for s in stores}

print(f"1. create+destroy, stub driver, {pairs} pairs per store, alternating (ms):")
print(f"{'':13} {'pair mean':>9} {'pair med':>9} {'create med':>10} {'destroy med':>11} "
      f"{'empty list med':>14}")
means, medians = {}, {}
for s in stores:
    total = [c + d for c, d in zip(creates[s], destroys[s])]
    means[s], medians[s] = statistics.mean(total), statistics.median(total)
    print(f"{s:13} {means[s]:>9.1f} {medians[s]:>9.1f} {statistics.median(creates[s]):>10.1f} "
          f"{statistics.median(destroys[s]):>11.1f} {empty[s]:>14.1f}")
ratio = means["postgresql"] / means["local"]
print(f"PG/local: mean {ratio:.2f}, median {medians['postgresql'] / medians['local']:.2f} "
      f"(target <= 1.5: {'met' if ratio <= 1.5 else 'NOT met'})")
print(f"without the keeper (ledger.keep_connections: 0): mean "
      f"{means['pg, no keeper'] / means['local']:.2f}")
PY
echo

# --- 2. list of N live records ------------------------------------------------------------------
# The records are the binary's own: one real create, cloned with fresh ids into a schema-1 file
# (as bench/ledger.sh does) and sealed by `ledger migrate`; the same records then go into
# PostgreSQL by `ledger export` / `ledger import`, the documented way a ledger moves. N creates
# would take minutes and measure the creates, not the list.
/usr/bin/python3 - "$BIN" "$WORK" "$LIST" <<'PY'
import copy, json, os, random, subprocess, sys

binary, work, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
seed = f"{work}/list-seed"
subprocess.run([binary, "--state-dir", seed, "--profiles-dir", f"{work}/profiles", "create",
                "--profile", "list", "--quiet"], check=True, capture_output=True)
doc = json.load(open(f"{seed}/ledger.json"))
live = doc["sandboxes"][0]
live.pop("chain_head", None)  # the migration seals fresh chains for the fresh ids
for entry in live["history"]:
    entry.pop("prev", None)
alphabet = "abcdefghijklmnopqrstuvwxyz234567"
records = []
for _ in range(count):
    r = copy.deepcopy(live)
    r["id"] = "sbx-" + "".join(random.choice(alphabet) for _ in range(12))
    r["name"] = r["backend_id"] = r["id"]
    records.append(r)
state = f"{work}/list-local"
os.makedirs(state, mode=0o700)
with open(f"{state}/ledger.json", "w") as f:
    json.dump({"schema_version": 1, "ledger_id": doc["ledger_id"], "sandboxes": records}, f,
              separators=(",", ":"))
os.chmod(f"{state}/ledger.json", 0o600)
PY
LIST_URL=$(db list)
mkdir -m 700 "$WORK/list-m1" # the machine's own state dir, which every machine has
start=$(now_ms)
"$BIN" --state-dir "$WORK/list-local" ledger migrate >/dev/null 2>&1
MIGRATE_MS=$(($(now_ms) - start))
"$BIN" --state-dir "$WORK/list-local" ledger export -f "$WORK/list.jsonl" 2>/dev/null
start=$(now_ms)
SANDBOXER_LEDGER=$LIST_URL "$BIN" --state-dir "$WORK/list-m1" ledger import "$WORK/list.jsonl" \
  -o json >"$WORK/import.json" 2>"$WORK/import.err" || fail "ledger import: $(cat "$WORK/import.err")"
IMPORT_MS=$(($(now_ms) - start))
[ "$(jq .imported "$WORK/import.json")" = "$LIST" ] || fail "import: $(cat "$WORK/import.json")"

/usr/bin/python3 - "$BIN" "$WORK" "$LIST_URL" "$LIST" "$MIGRATE_MS" "$IMPORT_MS" <<'PY'
import json, statistics, sys
from fleet_timed import make_timed

binary, work, url, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
migrate_ms, import_ms = int(sys.argv[5]), int(sys.argv[6])
stores = {
    "local": ({}, f"{work}/list-local"),
    "postgresql": ({"SANDBOXER_LEDGER": url, "SANDBOXER_HOST": "m1"}, f"{work}/list-m1"),
}

timed = make_timed(binary, stores)

for store in stores:  # both list every record, or the times mean nothing
    listed = len(json.loads(timed(store, "list", "-o", "json")[1]))
    if listed != count:
        sys.exit(f"FAIL: {store}: list -o json gave {listed} records, not {count}")
print(f"2. list of {count} live records (ms, median of 5; filled by migrate {migrate_ms} ms on the "
      f"local files, import {import_ms} ms into PostgreSQL):")
print(f"{'':12} {'list':>8} {'list -o json':>13}")
result = {}
for store in stores:
    result[store] = [statistics.median(timed(store, *args)[0] for _ in range(5))
                     for args in (["list"], ["list", "-o", "json"])]
    print(f"{store:12} {result[store][0]:>8.1f} {result[store][1]:>13.1f}")
ratios = [pg / local for pg, local in zip(result["postgresql"], result["local"])]
print(f"{'PG/local':12} {ratios[0]:>7.2f}x {ratios[1]:>12.2f}x")
PY
echo

# --- 3. reap of N expired sandboxes -------------------------------------------------------------
T0=2026-12-02T12:00:00Z
LATE=2026-12-02T13:00:00Z # an hour on: every 10m TTL has run out
# fill NAME: N real sandboxes (backend directories under the profile's root) created at T0 with a
# 10m TTL, on the local files of $WORK/NAME; PostgreSQL gets them by export/import, the records
# byte for byte. Creates on the local files go about twice as fast as on PostgreSQL here: the fill
# takes half the time, and it is the reap that is measured.
fill() {
  seq "$REAP" | xargs -P 4 -I{} env SANDBOXER_FAKE_NOW=$T0 "$TESTCLOCK" --state-dir "$WORK/$1" \
    --profiles-dir "$WORK/profiles" create --profile "$1" --ttl 10m --quiet >/dev/null
}
# into_pg NAME: a database NAME holding the sandboxes of fill NAME (prints its URI).
into_pg() {
  local url
  url=$(db "${1//-/_}")
  "$TESTCLOCK" --state-dir "$WORK/$1" ledger export -f "$WORK/$1.jsonl" 2>/dev/null
  SANDBOXER_LEDGER=$url "$TESTCLOCK" --state-dir "$WORK/$1-import" ledger import "$WORK/$1.jsonl" \
    >/dev/null 2>&1 || fail "import of $1"
  echo "$url"
}
# reaper OUT MACHINE [URL]: one reap an hour after T0, as MACHINE, on URL (else the local files
# of the fill: $WORK/MACHINE); its report (-o json) in OUT.json, its stderr in OUT.err.
reaper() {
  local out=$1 machine=$2 url=${3:-}
  local vars=("SANDBOXER_FAKE_NOW=$LATE")
  [ -z "$url" ] || vars+=(SANDBOXER_LEDGER="$url" SANDBOXER_HOST="$machine")
  [ -d "$WORK/$machine" ] || mkdir -m 700 "$WORK/$machine"
  env "${vars[@]}" "$TESTCLOCK" --state-dir "$WORK/$machine" --profiles-dir "$WORK/profiles" \
    reap --parallel "$PARALLEL" -o json --log-level warn >"$WORK/$out.json" 2>"$WORK/$out.err"
}
# check NAME URL|"" REPORT...: every one of the N sandboxes destroyed exactly once: once in the
# reapers' reports together, one claim (to: expired) and one destroy entry in its history, closed
# in the ledger, nothing left in the backend; fails loudly otherwise.
check() {
  local name=$1 url=$2 state=$WORK/$1; shift 2
  local destroyed unique failed left once
  destroyed=$(jq -s '[.[].items[] | select(.outcome == "destroyed")] | length' "$@")
  unique=$(jq -s '[.[].items[] | select(.outcome == "destroyed") | .id] | unique | length' "$@")
  failed=$(jq -s '[.[].items[] | select(.outcome == "failed")] | length' "$@")
  [ "$failed" = 0 ] || fail "$name: $failed destroy(s) failed: $(jq -s -c '[.[].items[] | select(.outcome == "failed")][:3]' "$@")"
  [ "$destroyed" = "$REAP" ] || fail "$name: the reapers destroyed $destroyed, not $REAP"
  [ "$unique" = "$REAP" ] ||
    fail "$name: $destroyed destroys of only $unique distinct sandboxes: some were destroyed twice"
  local vars=("SANDBOXER_FAKE_NOW=$LATE")
  [ -z "$url" ] || vars+=(SANDBOXER_LEDGER="$url")
  env "${vars[@]}" "$TESTCLOCK" --state-dir "$state" ledger export -f "$WORK/$name-after.jsonl" \
    2>/dev/null
  once=$(tail -n +2 "$WORK/$name-after.jsonl" | jq -s '[.[] | select(.state == "destroyed"
    and ([.history[] | select(.to == "expired")] | length) == 1
    and ([.history[] | select(.to == "destroyed")] | length) == 1)] | length')
  [ "$once" = "$REAP" ] || fail "$name: $once of $REAP records closed with exactly one claim and one destroy"
  left=$(find "$WORK/backend-$name/sandboxes" -mindepth 1 -maxdepth 1 | wc -l)
  [ "$left" = 0 ] || fail "$name: $left sandboxes left in the backend"
}
declare -A MS
fill reap-local
fill reap-pg1
fill reap-pg3
PG1_URL=$(into_pg reap-pg1)
PG3_URL=$(into_pg reap-pg3)

start=$(now_ms)
reaper local-1 reap-local || fail "the local reaper: $(cat "$WORK/local-1.err")"
MS[local]=$(($(now_ms) - start))
check reap-local "" "$WORK/local-1.json"

start=$(now_ms)
reaper pg1-m1 pg1-m1 "$PG1_URL" || fail "the reaper: $(cat "$WORK/pg1-m1.err")"
MS[pg1]=$(($(now_ms) - start))
check reap-pg1 "$PG1_URL" "$WORK/pg1-m1.json"

start=$(now_ms)
for m in m1 m2 m3; do
  reaper "pg3-$m" "pg3-$m" "$PG3_URL" &
  REAPERS+=($!)
done
for pid in "${REAPERS[@]}"; do wait "$pid" || fail "a reaper failed: $(cat "$WORK"/pg3-*.err)"; done
MS[pg3]=$(($(now_ms) - start))
REAPERS=()
check reap-pg3 "$PG3_URL" "$WORK"/pg3-m*.json
SPLIT=$(for m in m1 m2 m3; do
  jq -r --arg m "$m" '"\($m) \([.items[] | select(.outcome == "destroyed")] | length)/\([.items[] | select(.reason == "claimed by another reaper")] | length)/\([.items[] | select(.reason == "closed by another process")] | length)"' "$WORK/pg3-$m.json"
done | paste -sd ' ')

echo "3. reap of $REAP expired sandboxes (--parallel $PARALLEL each; each destroyed exactly once: checked):"
printf '%-34s %9s %9s %8s\n' "" "wall ms" "ms/sbx" "ratio"
row() { printf '%-34s %9d %9.2f %7.2fx\n' "$1" "$2" "$(echo "$2 / $REAP" | bc -l)" "$3"; }
row "local files, 1 reaper" "${MS[local]}" 1
row "PostgreSQL, 1 reaper" "${MS[pg1]}" "$(echo "${MS[pg1]} / ${MS[local]}" | bc -l)"
row "PostgreSQL, 3 reapers at once" "${MS[pg3]}" "$(echo "${MS[pg3]} / ${MS[local]}" | bc -l)"
printf 'PostgreSQL 3 reapers / 1 reaper: %.2f  (destroyed/passed over as claimed/as closed by another: %s)\n' \
  "$(echo "${MS[pg3]} / ${MS[pg1]}" | bc -l)" "$SPLIT"
