#!/usr/bin/env bash
# The fleet's events outbox on a real PostgreSQL (a throwaway cluster): events are rows committed
# with the change they describe, any machine delivers them (the one that made them may be gone),
# per sink in sequence order, each to the hub once even when two machines flush at once; a
# database at schema version 1 (before the shared outbox) is migrated on first use.
. "$(dirname "$0")/lib.sh"
RECEIVER="$(dirname "$0")/../event_receiver/receiver.py"

start_postgres
export SANDBOXER_LEDGER=$PG_URL
on() {
  local machine=$1
  shift
  SANDBOXER_HOST=$machine "$SANDBOXER" --state-dir "$WORK/state-$machine" \
    --profiles-dir "$PROFILES" "$@"
}

# The hub: its port is taken once, then it is stopped and started on that port at will.
SECRET_TOKEN="fleet-hub-token-$RANDOM$RANDOM"
export HUB_TOKEN=$SECRET_TOKEN
HUB=""
start_hub() {
  rm -f "$WORK/port"
  RECEIVER_PORT=${PORT:-0} /usr/bin/python3 "$RECEIVER" "$WORK/port" "$WORK/hub.jsonl" \
    "$SECRET_TOKEN" &
  HUB=$!
  for _ in $(seq 200); do [ -s "$WORK/port" ] && break; sleep 0.05; done
  [ -s "$WORK/port" ] || fail "the event hub did not start"
  PORT=$(cat "$WORK/port")
}
stop_hub() {
  [ -z "$HUB" ] || { kill "$HUB" 2>/dev/null || true; wait "$HUB" 2>/dev/null || true; }
  HUB=""
}
at_exit stop_hub
start_hub
stop_hub
cat >"$WORK/config.yaml" <<EOF2
events:
  - { type: http, url: "http://127.0.0.1:$PORT/events", token: { env: HUB_TOKEN }, timeout: 2s }
EOF2
export SANDBOXER_CONFIG=$WORK/config.yaml
stub_profile shared <<<"  root: $WORK/backend"

# --- version 1 (the outbox table without its text, no sink cursors) migrates on first use
expect_code 0 on m1 ledger migrate
psql_at "ALTER TABLE sandboxer.events DROP COLUMN body; DROP TABLE sandboxer.event_sinks;
         DROP TABLE sandboxer.closings; ALTER TABLE sandboxer.ledger_meta DROP COLUMN chain_head,
           DROP COLUMN chain_lines, DROP COLUMN chain_since;
         UPDATE sandboxer.schema_version SET version = 1" >/dev/null
expect_code 0 on m1 status
expect_contains "$OUT" "schema version 5"
[ "$(psql_at "SELECT count(*) FROM information_schema.columns WHERE table_schema = 'sandboxer'
              AND table_name = 'events' AND column_name = 'body'")" = 1 ] ||
  fail "the migration to version 2 did not add events.body"

# --- the hub is down: events wait in the database, whichever machine made them
expect_code 0 on m1 create --profile shared --name a --quiet
A=$OUT
expect_code 0 on m2 create --profile shared --name b --quiet
B=$OUT
expect_code 0 on m2 destroy "$A" --quiet
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 6 ] ||
  fail "6 events should wait in sandboxer.events: $(psql_at "SELECT seq, type FROM sandboxer.events")"
[ "$(psql_at "SELECT string_agg(DISTINCT origin_host, ',' ORDER BY origin_host) FROM sandboxer.events")" = m1,m2 ] ||
  fail "events should say which machine made them"
# Nothing of the outbox is on the machines any more.
[ -z "$(find "$WORK/state-m1" "$WORK/state-m2" -path '*outbox*' -name '*.json' 2>/dev/null)" ] ||
  fail "a machine kept event files of a shared ledger"
# A third machine sees them pending, with the sink that lacks them.
expect_code 0 on m3 events list --pending -o json
[ "$(jq length <<<"$OUT")" = 6 ] || fail "events list --pending on m3: $OUT"
[ "$(jq -r '[.[].pending_sinks[0]] | unique | .[0]' <<<"$OUT")" = "http http://127.0.0.1:$PORT/events" ] ||
  fail "pending sinks on m3: $OUT"
# The events' ids are the ledger's.
expect_code 0 on m3 history "$A" -o json
[ "$(jq length <<<"$OUT")" = 4 ] || fail "history of $A: $OUT"
for id in $(jq -r '.[].event_id' <<<"$OUT"); do
  [ "$(psql_at "SELECT count(*) FROM sandboxer.events WHERE event_id = '$id'")" = 1 ] ||
    fail "event $id of $A is not in the outbox"
done

# --- m1 is gone for good; m3, which made none of them, delivers them all, in order
rm -rf "$WORK/state-m1"
start_hub
expect_code 0 on m3 events flush --timeout 20s -o json
[ "$(jq .delivered <<<"$OUT")" = 6 ] || fail "events flush on m3: $OUT $ERR"
[ "$(jq -s length "$WORK/hub.jsonl")" = 6 ] || fail "the hub got: $(cat "$WORK/hub.jsonl")"
[ "$(jq -s '[.[].auth_ok] | all' "$WORK/hub.jsonl")" = true ] || fail "the hub's token was wrong"
# In sequence order: each sandbox's created before ready, A's destroying before destroyed.
jq -r '.event.subject + " " + (.event.type | split(".") | last)' "$WORK/hub.jsonl" >"$WORK/order"
grep -q . "$WORK/order" || fail "no event reached the hub"
diff <(grep "^$A " "$WORK/order") <(printf '%s\n' "$A created" "$A ready" "$A destroying" "$A destroyed") ||
  fail "events of $A out of order"
diff <(grep "^$B " "$WORK/order") <(printf '%s\n' "$B created" "$B ready") || fail "events of $B out of order"
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 0 ] || fail "delivered events stayed in the outbox"
[ "$(psql_at "SELECT max(delivered_seq) FROM sandboxer.event_sinks")" = \
  "$(psql_at "SELECT event_seq FROM sandboxer.ledger_meta")" ] || fail "the sink's cursor is not at the last event"
[ "$(psql_at "SELECT count(*) FROM sandboxer.event_sinks WHERE holder IS NOT NULL")" = 0 ] ||
  fail "a delivery turn was not given back"
grep -q "$SECRET_TOKEN" < <(psql_at "SELECT body FROM sandboxer.events; SELECT * FROM sandboxer.event_sinks") &&
  fail "the hub's token is in the database"

# --- the hub is up: a command delivers its own events at once
expect_code 0 on m2 destroy "$B" --quiet
[ "$(jq -s length "$WORK/hub.jsonl")" = 8 ] || fail "destroy did not deliver its events: $(tail -2 "$WORK/hub.jsonl")"

# --- two machines flush at once: one deliverer per sink, each event reaches the hub once
stop_hub
: >"$WORK/hub.jsonl"
# ... made by concurrent creates on two machines: every event gets its own number, none lost.
pids=()
for i in $(seq 10); do
  on "m$((i % 2 + 2))" create --profile shared --quiet >/dev/null 2>"$WORK/create$i.err" &
  pids+=($!)
done
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || fail "concurrent create $((i + 1)): $(cat "$WORK/create$((i + 1)).err")"
done
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 20 ] || fail "20 events should wait"
[ "$(psql_at "SELECT count(DISTINCT seq) = 20 AND max(seq) = (SELECT event_seq FROM sandboxer.ledger_meta) FROM sandboxer.events")" = t ] ||
  fail "concurrent writers numbered events twice: $(psql_at "SELECT seq, event_id FROM sandboxer.events")"
start_hub
on m2 events flush --timeout 20s >"$WORK/flush2.out" 2>"$WORK/flush2.err" &
F2=$!
on m3 events flush --timeout 20s >"$WORK/flush3.out" 2>"$WORK/flush3.err" || fail "flush on m3: $(cat "$WORK/flush3.err")"
wait "$F2" || fail "flush on m2: $(cat "$WORK/flush2.err")"
[ "$(jq -s length "$WORK/hub.jsonl")" = 20 ] ||
  fail "two flushes gave the hub $(jq -s length "$WORK/hub.jsonl") events, not 20"
[ "$(jq -s '[.[].event.id] | unique | length' "$WORK/hub.jsonl")" = 20 ] || fail "an event reached the hub twice"
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 0 ] || fail "delivered events stayed in the outbox"

# --- a deliverer that died keeps its turn only until its lease ends
stop_hub
expect_code 0 on m2 create --profile shared --quiet
psql_at "UPDATE sandboxer.event_sinks SET holder = 'm9 pid 1', lease_until = now() + interval '1 hour'" >/dev/null
start_hub
expect_code 4 on m3 events flush --timeout 1s
[ "$(jq -s length "$WORK/hub.jsonl")" = 20 ] || fail "a flush delivered while another held the sink's turn"
# A lifecycle command does not wait long on a held turn, even with a long delivery.wait: it goes
# on, its events wait in the table.
{ cat "$WORK/config.yaml"; echo "delivery: { wait: 30s }"; } >"$WORK/patient.yaml"
START=$(date +%s)
SANDBOXER_CONFIG=$WORK/patient.yaml expect_code 0 on m3 create --profile shared --quiet
[ $(($(date +%s) - START)) -lt 15 ] || fail "a create waited out its delivery.wait on a turn another held"
[ "$(jq -s length "$WORK/hub.jsonl")" = 20 ] || fail "a create delivered while another held the sink's turn"
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 4 ] || fail "4 events should wait for the held sink"
psql_at "UPDATE sandboxer.event_sinks SET lease_until = now() - interval '1 second'" >/dev/null
expect_code 0 on m3 events flush --timeout 10s
[ "$(jq -s length "$WORK/hub.jsonl")" = 24 ] || fail "the turn of a dead deliverer was not taken over"

# --- a machine's own sinks (a jsonl file here) are sent by that machine only: another would
#     write its own file. The file cannot be made at first (its directory is a file), so the
#     events wait; m3 may not write them even once it could.
stop_hub
: >"$WORK/logs"
stub_profile logged <<EOF2
  root: $WORK/backend
events:
  - { type: jsonl, path: $WORK/logs/events.jsonl }
EOF2
expect_code 0 on m2 create --profile logged --name bound --quiet
BOUND=$OUT
rm "$WORK/logs"
start_hub
expect_code 0 on m3 events flush --timeout 10s -o json
[ "$(jq -c '[.pending, .elsewhere]' <<<"$OUT")" = "[0,2]" ] || fail "flush on m3 with m2's file sink: $OUT"
[ ! -e "$WORK/logs/events.jsonl" ] || fail "m3 wrote m2's jsonl sink"
[ "$(jq -s length "$WORK/hub.jsonl")" = 26 ] || fail "m3 did not send the hub its events of $BOUND"
expect_code 0 on m3 events list --pending -o json
[ "$(jq -r '[.[].pending_sinks[]] | unique | join(",")' <<<"$OUT")" = "jsonl $WORK/logs/events.jsonl on m2" ] ||
  fail "pending sinks seen from m3: $OUT"
expect_code 0 on m2 events flush --timeout 10s -o json
[ "$(jq -c '[.delivered, .pending, .elsewhere]' <<<"$OUT")" = "[2,0,0]" ] || fail "flush on m2: $OUT"
[ "$(jq -r .subject "$WORK/logs/events.jsonl" | sort -u)" = "$BOUND" ] ||
  fail "m2's file got: $(cat "$WORK/logs/events.jsonl")"
[ "$(psql_at "SELECT count(*) FROM sandboxer.events")" = 0 ] || fail "delivered events stayed in the outbox"

# --- events of a machine's local ledger from before it joined the fleet are not lost in silence:
#     each command says where they wait and what sends them
stop_hub
expect_code 0 on m3 --ledger local create --profile shared --quiet
start_hub
expect_code 0 on m3 events list --pending
expect_contains "$ERR" "2 event(s) of this machine's local ledger wait in $WORK/state-m3/outbox"
expect_contains "$ERR" "sandboxer --ledger local events flush"
expect_code 0 on m3 --ledger local events flush
expect_code 0 on m3 events list --pending
[[ "$ERR" != *"local ledger wait"* ]] || fail "the warning stayed after the local flush: $ERR"
echo "ok"
