#!/usr/bin/env bash
# Faults of the fleet ledger in the middle of a command, on a real PostgreSQL (a throwaway
# cluster): the server crashing and coming back while a create waits on its backend, the
# command's connection dropped by the server, the server down for longer than --lock-timeout
# (exit 9, the intent kept for destroy to settle), a create SIGKILLed mid-way, another writer
# holding the writers' turn (exit 5). After each: nothing half-written, `ledger verify` passes,
# nothing left behind in the backend.
. "$(dirname "$0")/lib.sh"

start_postgres
export SANDBOXER_LEDGER=$PG_URL

BACKEND=$WORK/backend
# The backend call takes long enough for a fault to land inside it.
stub_profile slow <<EOF2
  root: $BACKEND
  latency: { create: 1500ms, destroy: 1500ms }
EOF2

# wait_for_row NAME STATE: waits until the record named NAME has STATE in the table (an intent
# committed).
wait_for_row() {
  local name=$1 state=$2
  for _ in $(seq 1 250); do
    [ "$(psql_at "select state from sandboxer.sandboxes where name = '$name'" 2>/dev/null)" = "$state" ] && return 0
    sleep 0.02
  done
  fail "sandbox $name never reached $state in the table (now: $(state_of "$name")); $(cat "$WORK"/*.err 2>/dev/null)"
}
state_of() { psql_at "select state from sandboxer.sandboxes where name = '$1'"; }
backend_leftovers() { find "$BACKEND/sandboxes" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l; }
expect_verified() {
  expect_code 0 sbx ledger verify
  expect_contains "$OUT" "ok"
}

# --- the server crashes and comes back while a create waits on its backend: the outcome
#     commit reconnects and lands
sbx create --profile slow --name crash-mid-create --quiet >"$WORK/c1.out" 2>"$WORK/c1.err" &
C1=$!
wait_for_row crash-mid-create creating
pg_restart immediate
wait $C1 || fail "create across a server crash failed: $(cat "$WORK/c1.err")"
[ "$(state_of crash-mid-create)" = running ] || fail "after the crash: $(state_of crash-mid-create)"
[ "$(psql_at "select count(*) from sandboxer.history h join sandboxer.sandboxes s on s.id = h.sandbox_id where s.name = 'crash-mid-create'")" = 2 ] ||
  fail "the create's history is not intent + outcome once each"
expect_verified

# --- the server drops the command's connection (an administrator, a proxy, a failover) while a
#     destroy waits on its backend
ID=$(cat "$WORK/c1.out")
sbx destroy "$ID" >"$WORK/d1.out" 2>"$WORK/d1.err" &
D1=$!
wait_for_row crash-mid-create destroying
psql_at "select count(pg_terminate_backend(pid)) from pg_stat_activity where application_name like 'sandboxer %'" >/dev/null
wait $D1 || fail "destroy across a dropped connection failed: $(cat "$WORK/d1.err")"
[ "$(state_of crash-mid-create)" = destroyed ] || fail "after the drop: $(state_of crash-mid-create)"
[ "$(backend_leftovers)" = 0 ] || fail "the backend kept $(ls -a "$BACKEND/sandboxes")"
expect_verified

# --- the server is down for longer than --lock-timeout: exit 9 naming the ledger; the intent
#     stays (the backend did make the sandbox) and destroy settles it once the server is back
sbx --lock-timeout 2 create --profile slow --name down-mid-create --quiet >"$WORK/c2.out" 2>"$WORK/c2.err" &
C2=$!
wait_for_row down-mid-create creating
pg_stop fast
rc=0
wait $C2 || rc=$?
[ "$rc" = 9 ] || fail "create with the server down: exit $rc, not 9: $(cat "$WORK/c2.err")"
expect_contains "$(cat "$WORK/c2.err")" "ledger $PG_URL"
expect_contains "$(cat "$WORK/c2.err")" "--lock-timeout"
START=$(date +%s)
expect_code 9 sbx --lock-timeout 1 list
[ $(($(date +%s) - START)) -lt 10 ] || fail "list with the server down took more than 10s"
expect_contains "$ERR" "ledger $PG_URL"
pg_restart fast
[ "$(state_of down-mid-create)" = creating ] || fail "the intent was lost: $(state_of down-mid-create)"
expect_code 0 sbx destroy down-mid-create
[ "$(state_of down-mid-create)" = destroyed ] || fail "not settled: $(state_of down-mid-create)"
[ "$(backend_leftovers)" = 0 ] || fail "the backend kept $(ls -a "$BACKEND/sandboxes")"
expect_verified

# --- a create SIGKILLed while its backend call runs: the intent stays, destroy settles it.
#     (The binary itself, not the sbx function: a background function is a subshell, and killing
#     it would leave the create running on.)
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile slow \
  --name killed-create --quiet >/dev/null 2>&1 &
K=$!
wait_for_row killed-create creating
kill -9 $K
wait $K 2>/dev/null || true
[ "$(state_of killed-create)" = creating ] || fail "after SIGKILL: $(state_of killed-create)"
expect_code 0 sbx destroy killed-create
[ "$(state_of killed-create)" = destroyed ] || fail "not settled: $(state_of killed-create)"
[ "$(backend_leftovers)" = 0 ] || fail "the backend kept $(ls -a "$BACKEND/sandboxes")"
expect_verified

# --- another session holds the writers' turn: exit 5 within --lock-timeout, nothing written
BEFORE=$(psql_at "select count(*) from sandboxer.sandboxes")
psql "$PG_URL" -XAtq -c "select pg_advisory_lock(7311459207350233202), pg_sleep(6)" >/dev/null 2>&1 &
HOLDER=$!
for _ in $(seq 1 250); do
  [ "$(psql_at "select count(*) from pg_locks where locktype = 'advisory' and granted")" -ge 1 ] && break
  sleep 0.02
done
expect_code 5 sbx --lock-timeout 1 create --profile slow --name blocked --quiet
expect_contains "$ERR" "another machine's writer held the ledger"
psql_at "select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory' and granted" >/dev/null
wait $HOLDER 2>/dev/null || true
[ "$(psql_at "select count(*) from sandboxer.sandboxes")" = "$BEFORE" ] || fail "a blocked create wrote a row"
expect_verified
echo "ok: fleet ledger faults"
