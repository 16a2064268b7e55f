#!/usr/bin/env bash
# The fleet ledger on a real PostgreSQL (a throwaway cluster): three simulated machines (own state
# dirs and SANDBOXER_HOST) sharing one database. Selection and secrecy of the password, 60
# concurrent creates, idempotency keys across machines, host-local records, three concurrent
# reapers on 60 expired sandboxes, a reaper killed mid-sweep and its claim taken over, a server
# restart between commands, and verify/evidence on the shared store.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"

start_postgres
export SANDBOXER_LEDGER=$PG_URL

T0=2026-12-02T12:00:00Z
LATE=2026-12-02T13:00:00Z
# on MACHINE [TIME] ARGS...: sandboxer as machine MACHINE (its own state dir and host name).
on() {
  local machine=$1; shift
  local now=$T0
  case "${1:-}" in 20*) now=$1; shift ;; esac
  SANDBOXER_HOST=$machine SANDBOXER_FAKE_NOW=$now \
    "$SANDBOXER" --state-dir "$WORK/state-$machine" --profiles-dir "$PROFILES" "$@"
}

# A remote backend (a root every machine reaches) and a host-local one.
stub_profile shared <<<"  root: $WORK/backend"
stub_profile slowdestroy <<EOF2
  root: $WORK/backend
  latency: { destroy: 400ms }
EOF2
stub_profile local <<<"  latency: { create: 1ms }"
# The same backend through an external driver process (the built-in stub served over the
# protocol): concurrent reapers lease several driver processes at once (issue 34.1).
: "${SANDBOXER_STUB_EXTERNAL:?set SANDBOXER_STUB_EXTERNAL (CTest does)}"
mkdir -p "$WORK/drivers"
ln -s "$SANDBOXER_STUB_EXTERNAL" "$WORK/drivers/sandboxer-driver-stub-external"
export SANDBOXER_DRIVER_PATH="$WORK/drivers"
printf 'driver: stub-external\nstub-external:\n  root: %s\n' "$WORK/backend" >"$PROFILES/shared-ext.yaml"

# --- selection: status and --version -v name the ledger; a password in the URI is refused
expect_code 0 on m1 status
expect_contains "$OUT" "postgresql $PG_URL (from \$SANDBOXER_LEDGER)"
expect_contains "$OUT" "schema version 5"
expect_code 0 on m1 --version -v
expect_contains "$OUT" "ledger: postgresql $PG_URL"
BAD=${PG_URL/sandboxer@/sandboxer:hunter2@}
expect_code 2 env SANDBOXER_LEDGER="$BAD" "$SANDBOXER" --state-dir "$WORK/state-m1" list
case "$ERR" in *hunter2*) fail "the password was shown: $ERR" ;; esac
expect_contains "$ERR" "password"
expect_code 2 on m1 --ledger "mysql://x/y" list
expect_contains "$ERR" "--ledger"

# A password from a secret reference (env), not from the pgpass file.
PASSWORD=$(head -n 1 "$PG_PASSFILE" | cut -d: -f5)
mkdir -p "$WORK/config"
cat >"$WORK/config/config.yaml" <<EOF2
ledger:
  url: $PG_URL
  password: { env: FLEET_DB_PASSWORD }
EOF2
expect_code 0 env -u SANDBOXER_LEDGER PGPASSFILE=/nonexistent FLEET_DB_PASSWORD="$PASSWORD" \
  SANDBOXER_CONFIG="$WORK/config/config.yaml" "$SANDBOXER" --state-dir "$WORK/state-m1" status -v
case "$OUT$ERR" in *"$PASSWORD"*) fail "the password was shown" ;; esac
expect_contains "$OUT" "(from $WORK/config/config.yaml:"

# --- 60 concurrent creates from three machines (m3's through the external driver)
pids=()
for m in m1 m2 m3; do
  profile=shared
  [ $m = m3 ] && profile=shared-ext
  for i in $(seq 1 20); do
    on $m create --profile $profile --ttl 10m --name "$m-$i" --quiet >"$WORK/create-$m-$i" 2>&1 &
    pids+=($!)
  done
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a concurrent create failed: $(cat "$WORK"/create-* | grep -v '^sbx-' | head -5)"; done
expect_code 0 on m2 list -o json
[ "$(jq 'length' <<<"$OUT")" = 60 ] || fail "60 creates, $(jq length <<<"$OUT") records"
[ "$(jq '[.[].id] | unique | length' <<<"$OUT")" = 60 ] || fail "ids not unique"
[ "$(psql_at "select count(*) from sandboxer.sandboxes where state = 'running'")" = 60 ] ||
  fail "the table does not hold 60 running sandboxes"
expect_code 0 on m3 ledger verify
expect_contains "$OUT" "60 record(s)"

# --- one idempotency key, two machines at once: one sandbox
on m1 create --profile shared --idempotency-key job-42 --quiet >"$WORK/idem-1" &
P1=$!
on m2 create --profile shared --idempotency-key job-42 --quiet >"$WORK/idem-2" &
P2=$!
wait $P1 && wait $P2 || fail "idempotent creates failed"
[ "$(cat "$WORK/idem-1")" = "$(cat "$WORK/idem-2")" ] ||
  fail "one key, two sandboxes: $(cat "$WORK/idem-1") $(cat "$WORK/idem-2")"
expect_code 0 on m3 destroy "$(cat "$WORK/idem-1")"

# --- a host-local record: listed with its host, refused elsewhere, destroyed at home
LOCAL=$(on m1 create --profile local --ttl 10m --quiet)
expect_code 0 on m2 list
expect_contains "$OUT" "HOST"
[ "$(grep "$LOCAL" <<<"$OUT" | awk '{print $NF}')" = m1 ] || fail "list HOST: $OUT"
expect_code 2 on m2 destroy "$LOCAL"
expect_contains "$ERR" "lives on host m1"

# --- three reapers at once on the 60 expired sandboxes (the host-local one stays for m1), each
# bounded: a reaper that hangs fails the test
pids=()
for m in m1 m2 m3; do
  SANDBOXER_HOST=$m SANDBOXER_FAKE_NOW=$LATE timeout -k 5 120 "$SANDBOXER" --state-dir "$WORK/state-$m" \
    --profiles-dir "$PROFILES" reap --parallel 4 -o json >"$WORK/reap-$m.json" 2>"$WORK/reap-$m.err" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a reaper failed: $(cat "$WORK"/reap-*.err)"; done
DESTROYED=$(jq -s '[.[].items[] | select(.outcome == "destroyed")] | length' "$WORK"/reap-m*.json)
[ "$DESTROYED" = 61 ] || fail "the reapers destroyed $DESTROYED, not 61 (60 + the local one on m1)"
DUP=$(jq -s '[.[].items[] | select(.outcome == "destroyed") | .id] | group_by(.) | map(select(length > 1)) | length' "$WORK"/reap-m*.json)
[ "$DUP" = 0 ] || fail "a sandbox was destroyed by two reapers"
[ "$(psql_at "select count(*) from sandboxer.history where entry->>'to' = 'expired'")" = 61 ] ||
  fail "each destroy should have exactly one claim entry"
LOCAL_BY=$(jq -r --arg id "$LOCAL" '.items[] | select(.id == $id and .outcome == "destroyed") | .id' "$WORK/reap-m1.json")
[ "$LOCAL_BY" = "$LOCAL" ] || fail "the host-local sandbox was not reaped by its own host"
expect_code 0 on m2 ledger verify

# --- a reaper killed mid-sweep: its claim stands until the lease ends, then another finishes
for i in $(seq 1 6); do on m1 create --profile slowdestroy --ttl 10m --quiet >/dev/null; done
SANDBOXER_HOST=m1 SANDBOXER_FAKE_NOW=$LATE "$SANDBOXER" --state-dir "$WORK/state-m1" \
  --profiles-dir "$PROFILES" reap --parallel 1 --claim-lease 3s >/dev/null 2>&1 &
KILLED=$!
# Killed while its destroy of a claimed sandbox takes its 400ms.
for _ in $(seq 1 200); do
  [ -n "$(psql_at "select id from sandboxer.sandboxes where claimed_by is not null and state = 'expired'")" ] && break
  sleep 0.02
done
kill -9 $KILLED
wait $KILLED 2>/dev/null || true
CLAIMED=$(psql_at "select id from sandboxer.sandboxes where claimed_by is not null and state = 'expired'")
[ -n "$CLAIMED" ] || fail "no claim left by the killed reaper"
expect_code 0 on m2 $LATE reap -o json
[ "$(jq -r --arg id "$CLAIMED" '.items[] | select(.id == $id) | .reason' <<<"$OUT")" = "claimed by another reaper" ] ||
  fail "the live claim was not respected: $OUT"
sleep 3.2
expect_code 0 on m3 $LATE reap -o json
[ "$(jq -r --arg id "$CLAIMED" '.items[] | select(.id == $id) | .outcome' <<<"$OUT")" = destroyed ] ||
  fail "the stale claim was not taken over: $OUT"
[ "$(psql_at "select count(*) from sandboxer.sandboxes where state not in ('destroyed', 'failed')")" = 0 ] ||
  fail "sandboxes left alive"

# --- the server restarts between two commands of a run; a command waits for it to come back
ID=$(on m1 create --profile shared --ttl 10m --quiet)
pg_restart fast
expect_code 0 on m1 exec "$ID" -- echo after-restart
expect_contains "$OUT" "after-restart"
expect_code 0 on m2 destroy "$ID"
expect_code 0 on m1 evidence "$ID" -o json
[ "$(jq -r '.chain.verified // .verified // empty' <<<"$OUT")" != false ] || fail "evidence: $OUT"
expect_code 0 on m3 ledger verify

# --- the chain of closed records (issue 34.4): a head kept elsewhere, and tamperings caught
expect_code 0 on m1 ledger head
KEPT=$OUT
[[ $KEPT =~ ^[0-9]+:sha256:[0-9a-f]{64}$ ]] || fail "ledger head: $KEPT"
[ "${KEPT%%:*}" -ge 60 ] || fail "the chain has fewer closings than records closed: $KEPT"
expect_code 0 on m2 ledger verify --head "$KEPT"
CLOSED=$(psql_at "SELECT id FROM sandboxer.sandboxes WHERE NOT resident ORDER BY position LIMIT 1")
pg_caught() { # WORDS [ARGS]: verify exits 8 saying WORDS
  echo "tampering: $1" >&2
  expect_code 8 on m3 ledger verify "${@:2}"
  expect_contains "$OUT" "$1"
}
psql_at "UPDATE sandboxer.sandboxes SET record = replace(record::text, '\"backend_id\":\"', '\"backend_id\":\"x')::json WHERE id = '$CLOSED'"
pg_caught "differs from what closing"
psql_at "UPDATE sandboxer.sandboxes SET record = replace(record::text, '\"backend_id\":\"x', '\"backend_id\":\"')::json WHERE id = '$CLOSED'"
psql_at "CREATE TABLE public.keep_s AS SELECT * FROM sandboxer.sandboxes WHERE id = '$CLOSED';
         CREATE TABLE public.keep_h AS SELECT * FROM sandboxer.history WHERE sandbox_id = '$CLOSED';
         CREATE TABLE public.keep_c AS SELECT * FROM sandboxer.closings WHERE seq = 2;
         CREATE TABLE public.keep_m AS SELECT * FROM sandboxer.ledger_meta;
         CREATE TABLE public.keep_l AS SELECT * FROM sandboxer.closings ORDER BY seq DESC LIMIT 1"
psql_at "DELETE FROM sandboxer.sandboxes WHERE id = '$CLOSED'"
pg_caught "it was deleted"
psql_at "INSERT INTO sandboxer.sandboxes SELECT * FROM public.keep_s; INSERT INTO sandboxer.history SELECT * FROM public.keep_h"
psql_at "DELETE FROM sandboxer.closings WHERE seq = 2"
pg_caught "closings were removed"
psql_at "INSERT INTO sandboxer.closings SELECT * FROM public.keep_c"
psql_at "UPDATE sandboxer.closings SET digest = 'sha256:' || repeat('0', 64) WHERE seq = 2"
pg_caught "journal_prev is"
psql_at "UPDATE sandboxer.closings SET digest = (SELECT digest FROM public.keep_c)  WHERE seq = 2"
# The last closing dropped and the head moved back to the one before: only its record tells.
psql_at "DELETE FROM sandboxer.closings WHERE seq = (SELECT seq FROM public.keep_l);
         UPDATE sandboxer.ledger_meta SET chain_head = (SELECT prev FROM public.keep_l), chain_lines = chain_lines - 1"
pg_caught "not on the chain of closed records"
pg_caught "but the journal's chain has only" --head "$KEPT"
psql_at "INSERT INTO sandboxer.closings SELECT * FROM public.keep_l;
         UPDATE sandboxer.ledger_meta SET chain_head = (SELECT chain_head FROM public.keep_m), chain_lines = (SELECT chain_lines FROM public.keep_m);
         DROP TABLE public.keep_s, public.keep_h, public.keep_c, public.keep_m, public.keep_l"
expect_code 0 on m1 ledger verify --head "$KEPT"

# --- moving: a local ledger into the database and back, ids and chains kept, idempotently
LOCAL_STATE=$WORK/state-local
for i in 1 2 3; do
  env -u SANDBOXER_LEDGER SANDBOXER_FAKE_NOW=$T0 "$SANDBOXER" --state-dir "$LOCAL_STATE" \
    --profiles-dir "$PROFILES" create --profile shared --quiet >/dev/null
done
psql_at "drop schema sandboxer cascade" 2>/dev/null
expect_code 0 "$SANDBOXER" --state-dir "$LOCAL_STATE" --ledger local ledger export -f "$WORK/local.jsonl"
expect_code 0 on m1 ledger import "$WORK/local.jsonl" -o json
[ "$(jq .imported <<<"$OUT")" = 3 ] || fail "import: $OUT"
expect_code 0 on m2 ledger import "$WORK/local.jsonl" -o json
[ "$(jq '[.imported, .already_present] | join(",")' -r <<<"$OUT")" = "0,3" ] || fail "import again: $OUT"
expect_code 0 on m2 ledger verify
expect_contains "$OUT" "3 record(s)"
expect_code 0 on m3 ledger export -f "$WORK/back.jsonl"
[ "$(head -n 1 "$WORK/local.jsonl" | jq -r .ledger_id)" = "$(head -n 1 "$WORK/back.jsonl" | jq -r .ledger_id)" ] ||
  fail "the ledger id was not kept"
diff <(tail -n +2 "$WORK/local.jsonl" | sort) <(tail -n +2 "$WORK/back.jsonl" | sort) >/dev/null ||
  fail "the records changed on the way through PostgreSQL"
printf '%s\n' "$(head -n 1 "$WORK/local.jsonl")" '{"id": "sbx-aaaaaaaaaaaa"' >"$WORK/broken.jsonl"
expect_code 2 on m1 ledger import "$WORK/broken.jsonl"
expect_contains "$ERR" "broken.jsonl:2"
echo "ok: fleet ledger on PostgreSQL"
