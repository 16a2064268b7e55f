#!/usr/bin/env bash
# The connection keeper of a fleet machine (docs/fleet.md, "Kept connections"): the first command
# starts it, the next ones use its session (the same database backend, no connection of their
# own), it survives a server restart and its own SIGKILL (the next keeper takes the socket over),
# a stalled one is passed over, it leaves when unused or when its directory goes, never shows the
# password, is off with ledger.keep_connections: 0s, and two at one place are refused.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"

start_postgres
export SANDBOXER_LEDGER=$PG_URL
KEEPERS="$STATE/ledger-keeper"
stub_profile default <<<"  latency: { create: 1ms }"

# keeper_pid: the pid of the live keeper serving $STATE (from its log), or nothing.
keeper_pid() {
  local pid
  pid=$(sed -n 's/.*keeper: serving .* (pid \([0-9]*\)).*/\1/p' "$KEEPERS/keeper.log" 2>/dev/null | tail -n 1)
  # A keeper that ended but whose parent has not reaped it yet (a zombie) counts as gone.
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] && [ "$(cut -d' ' -f3 "/proc/$pid/stat")" != Z ] && echo "$pid"
  return 0
}
# wait_until SECONDS CMD...: polls CMD every 0.1 s.
wait_until() {
  local tries=$(($1 * 10)); shift
  while ! "$@"; do
    tries=$((tries - 1))
    [ "$tries" -gt 0 ] || return 1
    sleep 0.1
  done
}
socket_up() { [ -S "$(ls "$KEEPERS"/*.sock 2>/dev/null | head -n 1)" ] && [ -n "$(keeper_pid)" ]; }
keeper_gone() { [ -z "$(keeper_pid)" ]; }
keeper_backends() {
  psql_at "select string_agg(pid::text, ',' order by pid) from pg_stat_activity where application_name like 'sandboxer keeper %'"
}
# Every keeper this test starts goes at its end (they also leave once $STATE is gone).
at_exit 'for f in "$WORK"/state*/ledger-keeper/keeper.log; do sed -n "s/.*(pid \([0-9]*\)).*/\1/p" "$f" 2>/dev/null; done | sort -u | xargs -r kill 2>/dev/null || true'

# --- the first command connects itself and starts the keeper; the socket is the user's only
expect_code 0 sbx list
wait_until 10 socket_up || fail "no keeper came up: $(cat "$KEEPERS/keeper.log" 2>/dev/null)"
[ "$(stat -c %a "$KEEPERS")" = 700 ] || fail "the keeper's directory is $(stat -c %a "$KEEPERS")"
SOCKET=$(ls "$KEEPERS"/*.sock)
[ "$(stat -c %a "$SOCKET")" = 600 ] || fail "the socket is $(stat -c %a "$SOCKET")"
PID1=$(keeper_pid)
tr '\0' ' ' <"/proc/$PID1/cmdline" | grep -q "ledger keep --idle 60s" ||
  fail "the keeper runs as: $(tr '\0' ' ' <"/proc/$PID1/cmdline")"
# The URI is in its environment, not in the arguments that `ps` shows every user.
! tr '\0' ' ' <"/proc/$PID1/cmdline" | grep -qF "$PG_URL" || fail "the ledger's URI is in the keeper's argv"

# --- the next commands run on the keeper's session: one backend, the same before and after
expect_code 0 sbx ledger info
expect_contains "$OUT" "through this machine's connection keeper"
BACKENDS=$(keeper_backends)
[ -n "$BACKENDS" ] || fail "no keeper session in pg_stat_activity"
for i in 1 2 3; do expect_code 0 sbx create --name "kept-$i" --quiet; done
expect_code 0 sbx destroy kept-1
[ "$(keeper_backends)" = "$BACKENDS" ] || fail "sessions $BACKENDS became $(keeper_backends)"
expect_code 0 sbx ledger verify
expect_contains "$OUT" "3 record(s)"
# A failed statement (an unknown sandbox) leaves the lent session clean for the next command.
expect_code 3 sbx destroy no-such-sandbox
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 2 ] || fail "after a failed command: $OUT"
[ "$(psql_at "select count(*) from pg_stat_activity where application_name like 'sandboxer keeper %' and state <> 'idle'")" = 0 ] ||
  fail "a kept session is not idle between commands: $(psql_at "select state from pg_stat_activity where application_name like 'sandboxer keeper %'")"

# --- a server restart: the kept sessions are dead; the next command still succeeds
pg_restart fast
expect_code 0 sbx create --name after-restart --quiet
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 3 ] || fail "after the restart: $OUT"
[ "$(keeper_pid)" = "$PID1" ] || fail "the keeper did not live through the restart"

# --- the server down longer than --lock-timeout: exit 9 naming the ledger, as without a keeper
pg_stop fast
expect_code 9 sbx --lock-timeout 2 list
expect_contains "$ERR" "$PG_URL"
pg_restart fast 2>/dev/null || PG_PID=$("$SANDBOXER_SOURCE_DIR/scripts/throwaway-postgres.sh" start "$PG_DIR/cluster" | sed -n 's/^PG_PID=//p')
expect_code 0 sbx list

# --- the keeper SIGKILLed: its socket stays; the next command connects itself, and the keeper it
#     starts takes the socket over
kill -9 "$PID1"
wait_until 5 keeper_gone || fail "the keeper did not die"
[ -S "$SOCKET" ] || fail "a killed keeper removed its socket"
expect_code 0 sbx create --name after-kill --quiet
wait_until 10 socket_up || fail "no new keeper: $(tail -5 "$KEEPERS/keeper.log")"
PID2=$(keeper_pid)
[ "$PID2" != "$PID1" ] || fail "the same keeper"
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 4 ] || fail "after the keeper's kill: $OUT"

# --- a stalled keeper (stopped): the command connects itself after a second's wait for its greeting
kill -STOP "$PID2"
START=$(date +%s%N)
expect_code 0 sbx --lock-timeout 5 create --name while-stalled --quiet
ELAPSED_MS=$((($(date +%s%N) - START) / 1000000))
kill -CONT "$PID2"
[ "$ELAPSED_MS" -lt 4000 ] || fail "a create waited ${ELAPSED_MS} ms on a stalled keeper"
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 5 ] || fail "after the stall: $OUT"

# --- a second keeper at the same place is refused (exit 5); SIGTERM ends one, socket removed
expect_code 5 sbx ledger keep
expect_contains "$ERR" "another keeper already serves"
kill -TERM "$PID2"
wait_until 10 keeper_gone || fail "SIGTERM did not end the keeper"
[ ! -e "$SOCKET" ] || fail "the keeper left its socket at SIGTERM"

# --- a keeper run in the foreground (a service manager's); its directory removed: it leaves
"$SANDBOXER" --state-dir "$STATE" ledger keep --idle 0 >"$WORK/keep.out" 2>"$WORK/keep.err" &
FOREGROUND=$!
wait_until 10 test -S "$SOCKET" || fail "ledger keep did not listen: $(cat "$WORK/keep.err")"
expect_code 0 sbx list
rm -rf "$KEEPERS"
wait_until 10 sh -c "! kill -0 $FOREGROUND 2>/dev/null" || fail "the keeper outlived its directory"
wait "$FOREGROUND" || fail "ledger keep exited $? when its directory went: $(cat "$WORK/keep.err")"

# --- unused for keep_connections, the keeper leaves; 0s: no keeper at all
mkdir -p "$WORK/config"
printf 'ledger: { keep_connections: 2s }\n' >"$WORK/config/config.yaml"
export SANDBOXER_CONFIG="$WORK/config/config.yaml"
expect_code 0 sbx list
wait_until 10 socket_up || fail "no keeper with keep_connections: 2s"
PID3=$(keeper_pid)
tr '\0' ' ' <"/proc/$PID3/cmdline" | grep -q -- "--idle 2s" || fail "the keeper's idle time: $(tr '\0' ' ' <"/proc/$PID3/cmdline")"
wait_until 15 keeper_gone || fail "the keeper stayed after 2s unused"
[ -z "$(ls "$KEEPERS"/*.sock 2>/dev/null)" ] || fail "an idle keeper left its socket"
printf 'ledger: { keep_connections: 0s }\n' >"$WORK/config/config.yaml"
rm -rf "$KEEPERS"
expect_code 0 sbx list
expect_code 0 sbx ledger info
expect_contains "$OUT" "connected directly"
sleep 0.5
[ -z "$(ls "$KEEPERS"/*.sock 2>/dev/null)" ] || fail "keep_connections: 0s started a keeper: $(ls "$KEEPERS")"

# --- the password: from a secret reference, in neither the keeper's argv nor its log
PASSWORD=$(head -n 1 "$PG_PASSFILE" | cut -d: -f5)
cat >"$WORK/config/config.yaml" <<EOF2
ledger:
  url: $PG_URL
  password: { env: FLEET_DB_PASSWORD }
EOF2
export FLEET_DB_PASSWORD=$PASSWORD
unset SANDBOXER_LEDGER
expect_code 0 env PGPASSFILE=/nonexistent "$SANDBOXER" --state-dir "$STATE" list
wait_until 10 socket_up || fail "no keeper with a password from the environment"
PID4=$(keeper_pid)
expect_code 0 env PGPASSFILE=/nonexistent "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --name with-secret --quiet
[ "$(psql_at "select count(*) from sandboxer.sandboxes where name = 'with-secret'")" = 1 ] ||
  fail "the create through the keeper did not land"
! tr '\0' ' ' <"/proc/$PID4/cmdline" | grep -qF "$PASSWORD" || fail "the password is in the keeper's argv"
! grep -qF "$PASSWORD" "$KEEPERS/keeper.log" || fail "the password is in the keeper's log"

# --- many commands at once on a machine without a keeper: one of them starts it, once
unset SANDBOXER_CONFIG
export SANDBOXER_LEDGER=$PG_URL
HERD=$WORK/state-herd
pids=()
for i in $(seq 1 12); do
  "$SANDBOXER" --state-dir "$HERD" --profiles-dir "$PROFILES" list >/dev/null 2>"$WORK/herd-$i.err" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a list of the herd failed: $(cat "$WORK"/herd-*.err)"; done
KEEPERS=$HERD/ledger-keeper
wait_until 10 socket_up || fail "no keeper after the herd: $(cat "$KEEPERS/keeper.log" 2>/dev/null)"
sleep 1
STARTS=$(grep -c "ledger keep" <(ps -eo args | grep -F -- "--state-dir $HERD ledger keep" | grep -v grep) || true)
[ "$STARTS" = 1 ] || fail "$STARTS keepers run for one state dir"
[ "$(grep -c "another keeper already serves" "$KEEPERS/keeper.log")" = 0 ] ||
  fail "the herd started more than one keeper: $(cat "$KEEPERS/keeper.log")"
rm -rf "$HERD"

# --- the keeper delivers no event when it leaves: the commands it serves deliver theirs (a keeper
#     leaving long after, on another's events, would race the machine's own `events flush`)
unset FLEET_DB_PASSWORD
STATE_EV=$WORK/state-events
KEEPERS=$STATE_EV/ledger-keeper
: >"$WORK/sinkdir" # a file where the sink's directory should be: the sink fails at first
printf 'events:\n  - { type: jsonl, path: "%s" }\n' "$WORK/sinkdir/events.jsonl" >"$WORK/config/events.yaml"
export SANDBOXER_CONFIG=$WORK/config/events.yaml
expect_code 0 "$SANDBOXER" --state-dir "$STATE_EV" --profiles-dir "$PROFILES" create --name evented --quiet
wait_until 10 socket_up || fail "no keeper for the events' machine"
rm "$WORK/sinkdir"
mkdir "$WORK/sinkdir"
kill -TERM "$(keeper_pid)"
wait_until 10 keeper_gone || fail "SIGTERM did not end the keeper"
[ ! -e "$WORK/sinkdir/events.jsonl" ] || fail "the keeper delivered events when it left: $(cat "$WORK/sinkdir/events.jsonl")"
expect_code 0 "$SANDBOXER" --state-dir "$STATE_EV" events flush -o json
[ "$(jq .delivered <<<"$OUT")" -ge 2 ] || fail "events flush after the keeper left: $OUT"
[ -s "$WORK/sinkdir/events.jsonl" ] || fail "events flush wrote nothing"
unset SANDBOXER_CONFIG

# --- the local files have no connections to keep
expect_code 2 sbx --ledger local ledger keep
expect_contains "$ERR" "only a PostgreSQL ledger"
echo "ok"
