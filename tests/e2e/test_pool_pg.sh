#!/usr/bin/env bash
# Warm pools on the fleet ledger (docs/pools.md, docs/fleet.md) on a real PostgreSQL (a throwaway
# cluster): a remote backend's pool is one for the fleet, three simulated machines (own state dirs
# and SANDBOXER_HOST) race 12 creates at once against a pool of 4, and each member goes to one
# create, once; the rest are cold (the claim reads the pool through its index). Then SIGKILL: a
# create waiting for its transaction's turn claims nothing and holds nothing; one killed after its
# claim committed keeps its member, claimed once; creates and fills killed at random moments leave
# nothing doubled once reap has settled them.
. "$(dirname "$0")/lib.sh"

start_postgres
export SANDBOXER_LEDGER=$PG_URL

# on MACHINE ARGS...: sandboxer as machine MACHINE (its own state dir and host name).
on() {
  local machine=$1
  shift
  SANDBOXER_HOST=$machine "$SANDBOXER" --state-dir "$WORK/state-$machine" --profiles-dir "$PROFILES" "$@"
}
# The stub with a shared root is a remote backend (every machine reaches it), as in
# test_fleet_pg.sh: its pool's key carries no host.
stub_profile warm <<EOF2
  root: $WORK/backend
  latency: { create: 100ms, status: 300ms }
EOF2
printf 'pool: { size: 4, max_age: 1h }\n' >>"$PROFILES/warm.yaml"
pooled() { psql_at "select count(*) from sandboxer.sandboxes where state = 'pooled'"; }

# --- one pool for the fleet: filled on m1, seen whole from m2
expect_code 0 on m1 pool fill --profile warm -o json
[ "$(jq -r '.[0] | "\(.pool) \(.size) \(.made) \(.errors | length)"' <<<"$OUT")" = "warm 4 4 0" ] ||
  fail "pool fill on m1: $OUT"
expect_code 0 on m2 pool status -o json
[ "$(jq -r '.[0] | "\(.pool) \(.ready) \(.filling)"' <<<"$OUT")" = "warm 4 0" ] ||
  fail "pool status on m2: $OUT"
expect_code 0 on m3 pool fill --profile warm -o json
[ "$(jq -r '.[0] | "\(.ready) \(.made)"' <<<"$OUT")" = "4 0" ] || fail "a full pool filled on m3: $OUT"
[ "$(pooled)" = 4 ] || fail "$(pooled) pooled rows, not 4"
# A claim reads one pool's rows through the partial index sandboxes_pooled (the query's shape).
PLAN=$(psql "$PG_URL" -XAtq -c "set enable_seqscan = off" -c "explain select s.id from
  sandboxer.sandboxes s where s.state in ('pooled', 'creating') and s.record->'pool'->>'key' = 'warm'
  and s.record->'pool'->>'claimed_at' is null order by s.created_at, s.position for update of s")
expect_contains "$PLAN" "sandboxes_pooled"
MEMBERS=$(psql_at "select id from sandboxer.sandboxes where state = 'pooled' order by id" | paste -sd' ')

# --- 12 creates at once, 4 on each of three machines: 4 claims, 8 cold creates
pids=()
for m in m1 m2 m3; do
  for i in 1 2 3 4; do
    on $m create --profile warm --name "$m-$i" -o json >"$WORK/c-$m-$i.json" 2>"$WORK/c-$m-$i.err" &
    pids+=($!)
  done
done
for pid in "${pids[@]}"; do
  wait "$pid" || fail "a concurrent create failed: $(cat "$WORK"/c-*.err | head -5)"
done
CLAIMED=$(jq -r 'select(.pool.claimed_by != null) | .id' "$WORK"/c-*.json | sort | paste -sd' ')
[ "$CLAIMED" = "$MEMBERS" ] || fail "claimed [$CLAIMED], the pool held [$MEMBERS]"
[ "$(jq -r 'select(.pool == null) | .id' "$WORK"/c-*.json | wc -l)" = 8 ] ||
  fail "not 8 cold creates: $(jq -c '{id, pool}' "$WORK"/c-*.json)"
[ "$(jq -r .id "$WORK"/c-*.json | sort -u | wc -l)" = 12 ] || fail "12 creates, not 12 sandboxes"
# Each claim is the create's own: its machine in the owner and in the claim's actor.
for f in "$WORK"/c-*.json; do
  m=$(basename "$f" .json | cut -d- -f2)
  [ "$(jq -r .owner.host "$f")" = "$m" ] || fail "$f: owner $(jq -c .owner "$f")"
  if [ "$(jq -r '.pool.claimed_by != null' "$f")" = true ]; then
    expect_contains "$(jq -r .pool.claimed_by "$f")" "$m"
  fi
done
# One claimed entry per member, in its history after created and pooled; no other history has one.
[ "$(psql_at "select string_agg(sandbox_id, ' ' order by sandbox_id) from sandboxer.history
  where entry->>'event' = 'claimed'")" = "$MEMBERS" ] || fail "claimed entries are not one per member"
for id in $MEMBERS; do
  expect_code 0 on m2 history "$id" -o json
  [ "$(jq -r '[.[].event] | join(" ")' <<<"$OUT")" = "created pooled claimed" ] ||
    fail "history of member $id: $(jq -c '[.[].event]' <<<"$OUT")"
done
# No backend sandbox is behind two records, and every one is running.
[ "$(psql_at "select count(distinct record->>'backend_id') || ' ' || count(*) from sandboxer.sandboxes
  where state = 'running'")" = "12 12" ] || fail "running records and their backends differ"
[ "$(find "$WORK/backend/sandboxes" -mindepth 1 -maxdepth 1 | wc -l)" = 12 ] ||
  fail "the backend holds $(find "$WORK/backend/sandboxes" -mindepth 1 -maxdepth 1 | wc -l) sandboxes"
[ "$(pooled)" = 0 ] || fail "$(pooled) members left after 4 claims"
expect_code 0 on m3 ledger verify
expect_code 0 on m1 destroy --all --yes

# --- SIGKILL during claims and fills. start_on MACHINE ARGS...: sandboxer as MACHINE in the
# background, its own pid in $BG (the process itself, not a subshell around it).
start_on() {
  local machine=$1
  shift
  SANDBOXER_HOST=$machine "$SANDBOXER" --state-dir "$WORK/state-$machine" --profiles-dir "$PROFILES" \
    "$@" >/dev/null 2>&1 &
  BG=$!
}
# wait_for SQL: polls until SQL gives a row (5 s at most).
wait_for() {
  for _ in $(seq 250); do
    [ -z "$(psql_at "$1")" ] || return 0
    sleep 0.02
  done
  fail "waited 5 s in vain for: $1"
}
claims() { psql_at "select count(*) from sandboxer.history where entry->>'event' = 'claimed'"; }
expect_code 0 on m1 pool fill --profile warm --quiet
# 1. Killed in its claim's transaction, waiting for the writers' turn (another session holds it):
# the transaction dies with the process, nothing is claimed, and the next create claims at once.
# The writers' turn is advisory lock 7311459207350233202 (pg/pg_store.cpp); the holder's session
# ends with the cluster if the test fails before it is terminated.
PGAPPNAME=pool-test-holder psql "$PG_URL" -XAtq -c "select pg_advisory_lock(7311459207350233202)" \
  -c "select pg_sleep(20)" >/dev/null 2>&1 &
HOLDER=$!
wait_for "select 1 from pg_locks l join pg_stat_activity a using (pid) where l.locktype = 'advisory'
  and l.granted and a.application_name = 'pool-test-holder'"
CLAIMS=$(claims)
start_on m2 create --profile warm
wait_for "select 1 from pg_locks where locktype = 'advisory' and not granted"
kill -KILL "$BG" 2>/dev/null || true
wait "$BG" 2>/dev/null || true
psql_at "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'pool-test-holder'" >/dev/null
wait "$HOLDER" 2>/dev/null || true
[ "$(claims)" = "$CLAIMS" ] || fail "a create killed before its turn claimed a member"
[ "$(pooled)" = 4 ] || fail "$(pooled) members after a create killed before its turn, not 4"
OLDEST=$(psql_at "select id from sandboxer.sandboxes where state = 'pooled' order by created_at, position limit 1")
expect_code 0 timeout 20 env SANDBOXER_HOST=m3 "$SANDBOXER" --state-dir "$WORK/state-m3" \
  --profiles-dir "$PROFILES" create --profile warm -o json
[ "$(jq -r '"\(.id) \(.pool.claimed_by != null)"' <<<"$OUT")" = "$OLDEST true" ] ||
  fail "after the kill, not a claim of the oldest member ($OLDEST): $OUT"
# 2. Killed after its claim committed, while the member is checked (the stub's status takes
# 300ms): the member is this create's sandbox, claimed once, and running.
start_on m1 create --profile warm
wait_for "select 1 from sandboxer.history where entry->>'event' = 'claimed' and entry->>'actor' like '% pid $BG'"
kill -KILL "$BG" 2>/dev/null || true # it may have finished meanwhile: the checks below hold too
wait "$BG" 2>/dev/null || true
KILLED=$(psql_at "select sandbox_id from sandboxer.history where entry->>'event' = 'claimed' and
  entry->>'actor' like '% pid $BG'")
[ "$(psql_at "select state from sandboxer.sandboxes where id = '$KILLED'")" = running ] ||
  fail "the member claimed by a killed create is not running"
# 3. Killed at random moments: creates (claims or cold) and fills, on every machine.
for round in $(seq 8); do
  m=m$((round % 3 + 1))
  if ((round % 4 == 0)); then start_on $m pool fill --profile warm; else start_on $m create --profile warm; fi
  sleep "0.$((RANDOM % 4))$((RANDOM % 10))"
  kill -KILL "$BG" 2>/dev/null || true
  wait "$BG" 2>/dev/null || true
done
# Reap settles what the kills left (creating members, interrupted creates): afterwards every
# member is pooled or claimed once, and every backend sandbox has a live record of its own.
expect_code 0 on m1 reap --stuck-after 0s
[ "$(psql_at "select count(*) from sandboxer.sandboxes where state in ('creating', 'destroying')")" = 0 ] ||
  fail "reap left transitional records: $(psql_at "select id, state from sandboxer.sandboxes where state in ('creating', 'destroying')")"
[ -z "$(psql_at "select sandbox_id from sandboxer.history where entry->>'event' = 'claimed'
  group by sandbox_id having count(*) > 1")" ] || fail "a member claimed twice"
[ "$(psql_at "select count(*) from sandboxer.sandboxes where record->'pool'->>'claimed_at' is not
  null and state = 'pooled'")" = 0 ] || fail "a claimed member is back in the pool"
for dir in "$WORK"/backend/sandboxes/*; do
  [ -e "$dir" ] || continue
  id=$(basename "$dir")
  state=$(psql_at "select state from sandboxer.sandboxes where id = '$id'")
  case $state in running | pooled) ;; *) fail "backend sandbox $id left, its record ${state:-missing}" ;; esac
done
[ "$(psql_at "select count(distinct record->>'backend_id') || ' ' || count(*) from sandboxer.sandboxes
  where state in ('running', 'pooled')")" = \
  "$(find "$WORK/backend/sandboxes" -mindepth 1 -maxdepth 1 | wc -l) $(find "$WORK/backend/sandboxes" -mindepth 1 -maxdepth 1 | wc -l)" ] ||
  fail "live records and backend sandboxes differ: $(psql_at "select id || ' ' || state || ' ' ||
    coalesce(record->>'backend_id', '-') from sandboxer.sandboxes where state in ('running',
    'pooled') order by id" | tr '\n' ';') against $(ls "$WORK/backend/sandboxes" | tr '\n' ' ')"
expect_code 0 on m3 ledger verify
expect_code 0 on m2 destroy --all --yes
echo "ok: one pool for the fleet on PostgreSQL, each member claimed once"
