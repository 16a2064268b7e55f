#!/usr/bin/env bash
# Lifecycle events through every sink (stub driver, a hub on loopback): order per sandbox, ids
# that match the ledger, delivery after an outage, nothing lost while the hub is down, bounded
# delay while it hangs, Retry-After honoured, nothing lost by a killed process, and no secret in
# any output or file.
. "$(dirname "$0")/lib.sh"
RECEIVER="$(dirname "$0")/../event_receiver/receiver.py"

SECRET_TOKEN="hub-token-$RANDOM$RANDOM-do-not-leak"
SECRET_KEY="key-file-value-$RANDOM$RANDOM-do-not-leak"
export HUB_TOKEN="$SECRET_TOKEN"
printf '%s\n' "$SECRET_KEY" >"$WORK/api.key"
chmod 600 "$WORK/api.key"

start_receiver() {
  rm -f "$WORK/port"
  RECEIVER_PORT=${1:-0} python3 "$RECEIVER" "$WORK/port" "$WORK/hub.jsonl" "$SECRET_TOKEN" &
  HUB=$!
  for _ in $(seq 200); do [ -e "$WORK/port" ] && break; sleep 0.05; done
  PORT=$(cat "$WORK/port")
}
stop_receiver() { kill "$HUB" 2>/dev/null || true; wait "$HUB" 2>/dev/null || true; }
hub_mode() {
  python3 -c 'import sys, urllib.request
urllib.request.urlopen(urllib.request.Request(sys.argv[1], data=sys.argv[2].encode()), timeout=10)' \
    "http://127.0.0.1:$PORT/control" "$1"
}
trap 'stop_receiver; rm -rf "$WORK"' EXIT
start_receiver

cat >"$WORK/hook" <<EOF2
#!/bin/sh
cat >>"$WORK/hook.jsonl"
EOF2
chmod +x "$WORK/hook"
mkdir -p "$WORK/config"
cat >"$WORK/config/config.yaml" <<EOF2
events:
  - { type: http, url: "http://127.0.0.1:$PORT/events", token: { env: HUB_TOKEN }, timeout: 2s,
      retries: 3, headers: { X-Team: e2e } }
  - { type: exec, command: ["$WORK/hook"] }
delivery: { wait: 1500ms }
EOF2
export SANDBOXER_CONFIG="$WORK/config/config.yaml"
stub_profile dev <<EOF2
  root: $WORK/backend
EOF2
# The profile's own sink and a secret the driver is given.
cat >>"$PROFILES/dev.yaml" <<EOF2
events: [ { type: jsonl, path: "$WORK/profile-events.jsonl" } ]
secrets: { api_key: { file: "$WORK/api.key" } }
EOF2

ids_of_hub() { jq -r --arg s "$1" 'select(.event.subject == $s) | .event.id' "$WORK/hub.jsonl"; }
types_of_hub() {
  jq -r --arg s "$1" 'select(.event.subject == $s) | .event.type | sub("dev.sandboxer.sandbox."; "")' \
    "$WORK/hub.jsonl" | paste -sd, -
}
ledger_ids() { ledger_jq --arg s "$1" '.sandboxes[] | select(.id == $s) | .history[].event_id'; }

# 1. A whole lifecycle: every sink gets every event, in order, with the ledger's ids.
expect_code 0 sbx -v create --profile dev --name web --quiet
ID=$OUT
expect_code 0 sbx -v exec web -- sh -c "echo hello"
expect_code 0 sbx snapshot web --name base --quiet
expect_code 0 sbx extend web --by 10m --quiet
expect_code 0 sbx -v destroy web --quiet
want=created,ready,exec.started,exec.finished,snapshotting,snapshotted,extended,destroying,destroyed
[ "$(types_of_hub "$ID")" = "$want" ] || fail "hub got: $(types_of_hub "$ID")"
[ "$(ids_of_hub "$ID")" = "$(ledger_ids "$ID")" ] || fail "hub ids differ from the ledger's"
[ "$(jq -r --arg s "$ID" 'select(.subject == $s) | .id' "$WORK/profile-events.jsonl")" = \
  "$(ledger_ids "$ID")" ] || fail "jsonl sink differs"
[ "$(jq -r --arg s "$ID" 'select(.subject == $s) | .id' "$WORK/hook.jsonl")" = \
  "$(ledger_ids "$ID")" ] || fail "exec sink differs"
[ "$(jq -s 'map(select(.auth_ok | not)) | length' "$WORK/hub.jsonl")" = 0 ] || fail "bearer token"
[ "$(jq -r '.content_type' "$WORK/hub.jsonl" | sort -u)" = \
  "application/cloudevents+json; charset=utf-8" ] || fail "content type"
E=$(jq -c --arg s "$ID" 'select(.event.subject == $s) | .event' "$WORK/hub.jsonl" | sed -n 2p)
[ "$(jq -r '.specversion + " " + .type + " " + .subject' <<<"$E")" = \
  "1.0 dev.sandboxer.sandbox.ready $ID" ] || fail "envelope: $E"
jq -e '.source | startswith("sandboxer://")' <<<"$E" >/dev/null || fail "source: $E"
jq -e '.data.sandbox.state == "running" and .data.from == "creating" and .data.reason == "created"
  and (.data.duration_ms | type) == "number" and (.data.driver_ms | type) == "number"
  and (.data.actor | test("pid"))' <<<"$E" >/dev/null || fail "data: $E"
jq -s -e 'map(.event.sequence) | . == sort' "$WORK/hub.jsonl" >/dev/null || fail "out of order"
[ -z "$(ls "$STATE/outbox" | grep -v '^sinks$')" ] || fail "outbox not empty: $(ls "$STATE/outbox")"
expect_code 0 sbx history "$ID" -o json
[ "$(jq -r 'map(.event) | join(",")' <<<"$OUT")" = "$want" ] || fail "history: $OUT"

# 2. The hub fails: commands still succeed, the events wait, events flush delivers them in order.
hub_mode '{"mode": "fail"}'
expect_code 0 sbx create --profile dev --quiet
ID2=$OUT
expect_code 0 sbx destroy "$ID2" --quiet
[ -z "$(ids_of_hub "$ID2")" ] || fail "hub was down but got events"
expect_code 0 sbx events list --pending -o json
[ "$(jq length <<<"$OUT")" = 4 ] || fail "pending: $OUT"
expect_contains "$(jq -r '.[0].pending_sinks[0]' <<<"$OUT")" "http http://127.0.0.1:$PORT/events"
expect_code 4 sbx events flush --timeout 2s
hub_mode '{"mode": "ok"}'
expect_code 0 sbx events flush -o json
[ "$(jq -r .pending <<<"$OUT")" = 0 ] || fail "flush: $OUT"
[ "$(types_of_hub "$ID2")" = created,ready,destroying,destroyed ] || fail "after outage: $(types_of_hub "$ID2")"
[ "$(jq -r --arg s "$ID2" 'select(.subject == $s) | .id' "$WORK/hook.jsonl" | wc -l)" = 4 ] ||
  fail "the exec sink lost events while the hub was failing"

# 3. The hub is gone for a whole lifecycle; the next command (any command) delivers.
stop_receiver
expect_code 0 sbx create --profile dev --quiet
ID3=$OUT
expect_code 0 sbx exec "$ID3" -- true
expect_code 0 sbx destroy "$ID3" --quiet
start_receiver "$PORT"
expect_code 0 sbx list --quiet
[ "$(types_of_hub "$ID3")" = created,ready,exec.started,exec.finished,destroying,destroyed ] ||
  fail "after a whole lifecycle down: $(types_of_hub "$ID3")"

# 4. The hub hangs: an operation waits at most the delivery budget (1.5s) per pass, not the hang.
hub_mode '{"mode": "hang", "times": 3}'
expect_code 0 timeout 20 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create \
  --profile dev --quiet
ID4=$OUT
hub_mode '{"mode": "ok"}'
expect_code 0 timeout 30 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" events flush
[ "$(types_of_hub "$ID4" | cut -d, -f1-2)" = created,ready ] || fail "after hang: $(types_of_hub "$ID4")"

# 5. 429 with Retry-After: 1: flush waits as asked, then delivers.
hub_mode '{"mode": "fail"}'
expect_code 0 sbx destroy "$ID4" --quiet
hub_mode '{"mode": "429", "times": 1}'
before=$(wc -l <"$WORK/hub.jsonl")
expect_code 0 sbx events flush
[ "$(types_of_hub "$ID4")" = created,ready,destroying,destroyed ] || fail "after 429: $(types_of_hub "$ID4")"
refused_at=$(jq -s '.[-1].at' "$WORK/hub.jsonl.refused")
accepted_at=$(tail -n +"$((before + 1))" "$WORK/hub.jsonl" | jq -s 'map(.at) | min')
python3 -c "import sys; sys.exit(0 if $accepted_at - $refused_at >= 0.9 else 1)" ||
  fail "Retry-After not honoured: refused at $refused_at, accepted at $accepted_at"

# 5b. expiring: one event per sandbox per deadline inside the window; an extend re-arms it. Reap's
# metrics count the deliveries and the outbox.
expect_code 0 sbx create --profile dev --ttl 5m --quiet
ID5=$OUT
expect_code 0 sbx reap --expiring-window 10m --metrics-file "$WORK/reap.prom"
expect_code 0 sbx reap --expiring-window 10m
[ "$(types_of_hub "$ID5")" = created,ready,expiring ] || fail "expiring: $(types_of_hub "$ID5")"
jq -e --arg s "$ID5" 'select(.event.subject == $s and .event.type == "dev.sandboxer.sandbox.expiring")
  | .event.data.details.expiring.window == "10m"' "$WORK/hub.jsonl" >/dev/null || fail "expiring data"
grep -qx 'sandboxer_events_outbox 0' "$WORK/reap.prom" || fail "metrics: $(cat "$WORK/reap.prom")"
grep -qx 'sandboxer_events_delivered_total [1-9][0-9]*' "$WORK/reap.prom" || fail "metrics: $(cat "$WORK/reap.prom")"
expect_code 0 sbx extend "$ID5" --by 30m --quiet
expect_code 0 sbx reap --expiring-window 1h
[ "$(types_of_hub "$ID5")" = created,ready,expiring,extended,expiring ] ||
  fail "expiring after extend: $(types_of_hub "$ID5")"
expect_code 0 sbx destroy "$ID5" --quiet

# 6. SIGKILL at random points: no event whose ledger change committed is ever lost.
stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 300ms }
EOF2
kill_creates_at_random slow 10
expect_code 0 sbx events flush
committed=$(ledger_jq '.sandboxes[].history[].event_id' | sort)
received=$(jq -r '.event.id' "$WORK/hub.jsonl" | sort -u)
missing=$(comm -23 <(echo "$committed") <(echo "$received"))
[ -z "$missing" ] || fail "committed but never delivered: $missing"
extra=$(comm -13 <(echo "$committed") <(echo "$received"))
[ -z "$extra" ] || fail "delivered but never committed: $extra"
[ -z "$(ls "$STATE/outbox" | grep -v '^sinks$')" ] || fail "outbox left: $(ls "$STATE/outbox")"

# 6b. Event lines never mix with data on stdout (issue 14.4): a stderr sink, and an fd sink on a
# descriptor the caller opened; the old stdout sink is refused with the way out.
stub_profile loud <<EOF2
  root: $WORK/backend
EOF2
echo 'events: [ { type: stderr }, { type: fd, fd: 3 } ]' >>"$PROFILES/loud.yaml"
OUT=$(sbx create --profile loud -o json 2>"$WORK/loud-err" 3>"$WORK/loud-fd3")
LOUD_ID=$(jq -r .id <<<"$OUT") || fail "stdout is not one JSON record: $OUT"
[ "$(wc -l <<<"$OUT")" = 1 ] || fail "stdout has more than the record: $OUT"
[ "$(grep '^{' "$WORK/loud-err" | jq -r .type | paste -sd, -)" = \
  dev.sandboxer.sandbox.created,dev.sandboxer.sandbox.ready ] || fail "stderr sink: $(cat "$WORK/loud-err")"
[ "$(jq -r .type "$WORK/loud-fd3" | paste -sd, -)" = \
  dev.sandboxer.sandbox.created,dev.sandboxer.sandbox.ready ] || fail "fd sink: $(cat "$WORK/loud-fd3")"
[ "$(jq -r .subject "$WORK/loud-fd3" | sort -u)" = "$LOUD_ID" ] || fail "fd subject"
STDOUT_EVENTS=$(cat "$WORK/loud-err" "$WORK/loud-fd3")
expect_code 0 sbx destroy "$LOUD_ID" --quiet 3>/dev/null
STDOUT_EVENTS+=$ERR
echo 'events: [ { type: stdout } ]' >"$WORK/stdout-sink.yaml"
printf 'driver: stub\nevents: [ { type: stdout } ]\n' >"$PROFILES/old-stdout.yaml"
expect_code 2 sbx create --profile old-stdout
expect_contains "$ERR" "old-stdout.yaml:2:19: events[0].type: stdout carries only the command's data"

# 7. No secret anywhere: state dir, every sink, the outputs (incl. debug logs) of this test.
for secret in "$SECRET_TOKEN" "$SECRET_KEY"; do
  ! grep -rqF "$secret" "$STATE" "$WORK/hub.jsonl" "$WORK/hook.jsonl" "$WORK/profile-events.jsonl" ||
    fail "a secret leaked into a file: $(grep -rlF "$secret" "$WORK")"
  expect_code 0 sbx -v --log-level debug events list -o json
  ! grep -qF "$secret" <<<"$OUT$ERR$STDOUT_EVENTS" || fail "a secret leaked into output"
done
echo ok
