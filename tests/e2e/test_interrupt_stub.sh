#!/usr/bin/env bash
# Interrupted work (issue 14.1, 14.2) on the stub driver: SIGINT/SIGTERM to a real sandboxer
# process in the middle of a create's readiness wait and of an exec, and a SIGKILL'd create that
# destroy and reap must finish.
source "$(dirname "$0")/lib.sh"

stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { ready: 60s }
EOF2
stub_profile quick <<EOF2
  root: $WORK/backend
EOF2

# The stub has made the sandbox's directory.
stub_made() { [ -d "$WORK/backend/sandboxes/$1" ]; }

for signal in INT TERM; do
  start_slow_create "by-$signal" stub_made
  interrupt_slow_create "$signal" "by-$signal"
  expect_contains "$(record "$ID" .error)" "removed the 1 backend resource"
  [ ! -e "$WORK/backend/sandboxes/$ID" ] || fail "SIG$signal: the backend resource is still there"
done

# A SIGKILL leaves the record creating with no backend id: destroy finds the resource by its label.
start_slow_create killed stub_made
kill -KILL "$PID"; wait "$PID" 2>/dev/null || true
[ "$(record "$ID" .state)" = creating ] || fail "killed create is $(record "$ID" .state)"
expect_code 0 sbx destroy killed
[ "$(record "$ID" .state)" = destroyed ] || fail "destroy left $(record "$ID" .state)"
[ ! -e "$WORK/backend/sandboxes/$ID" ] || fail "destroy said destroyed and left the resource"

# ... and reap --stuck-after destroys it instead of calling it running.
start_slow_create stuck stub_made
kill -KILL "$PID"; wait "$PID" 2>/dev/null || true
expect_code 0 sbx reap --stuck-after 0s --skew 0s -o json
[ "$(jq -r --arg id "$ID" '.items[] | select(.id == $id) | .outcome' <<<"$OUT")" = destroyed ] ||
  fail "reap repair: $OUT"
[ "$(record "$ID" .state)" = destroyed ] || fail "reap left $(record "$ID" .state)"
[ ! -e "$WORK/backend/sandboxes/$ID" ] || fail "reap left the resource"

# Ctrl-C during exec goes on to the command, and the history records how it ended.
ID=$(sbx create --profile quick --quiet)
expect_exec_forwards_sigint "$ID"

# SIGTERM to reap (systemd stopping its unit): the destroy under way finishes, no new one starts,
# and the run exits 143 with nothing half-done.
stub_profile slowdestroy <<EOF2
  root: $WORK/backend
  latency: { destroy: 2s }
EOF2
for _ in 1 2 3; do sbx create --profile slowdestroy --ttl 1s --quiet >/dev/null; done
sleep 1.5
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" reap --skew 0s --parallel 1 -o json \
  >"$WORK/reap-out" 2>"$WORK/reap-err" &
PID=$!
# Once the first destroy is under way (its claim is committed: state expired), not before.
for _ in $(seq 600); do
  [ "$(ledger_jq '[.sandboxes[] | select(.state == "expired")] | length')" = 1 ] && break
  sleep 0.05
done
kill -TERM "$PID"
rc=0; wait "$PID" || rc=$?
[ "$rc" = 143 ] || fail "reap: exit $rc, expected 143 ($(cat "$WORK/reap-err"))"
destroyed=$(jq '[.items[] | select(.outcome == "destroyed")] | length' "$WORK/reap-out")
skipped=$(jq '[.items[] | select(.reason == "interrupted by SIGTERM")] | length' "$WORK/reap-out")
[ "$destroyed" = 1 ] && [ "$skipped" = 2 ] || fail "reap after SIGTERM: $(cat "$WORK/reap-out")"
[ "$(ledger_jq '[.sandboxes[] | select(.profile.name == "slowdestroy" and .state == "running")] | length')" = 2 ] ||
  fail "the sandboxes reap did not start on are not left as they were"
# Off a terminal every stderr line carries its time, as the log's do: exec's own 127 line, and the
# third signal's, written from the signal handler.
STAMP='^20[0-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:[0-5][0-9][.][0-9]{3}Z sandboxer: '
Q=$(sbx create --profile quick --quiet)
expect_code 127 sbx exec "$Q" -- nosuchprog
[[ "$ERR" =~ ${STAMP}exec:\ nosuchprog:\ command\ not\ found ]] || fail "exec's 127 line: $ERR"
stub_profile slowundo <<EOF2
  root: $WORK/backend
  latency: { ready: 60s, destroy: 60s }
EOF2
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile slowundo \
  --name thrice >/dev/null 2>"$WORK/err-thrice" &
PID=$!
for _ in $(seq 600); do
  T=$(ledger_jq '.sandboxes[] | select(.name == "thrice") | .id' 2>/dev/null || true)
  [ -n "$T" ] && stub_made "$T" && break
  sleep 0.05
done
kill -INT "$PID"
sleep 0.5 # in the slow undo now
kill -INT "$PID"
sleep 0.3 # two signals sent at once may reach the process as one
kill -INT "$PID"
rc=0
wait "$PID" || rc=$?
[ "$rc" = 130 ] || fail "the third signal: exit $rc ($(cat "$WORK/err-thrice"))"
grep -Eq "${STAMP}third signal: exiting now without cleanup" "$WORK/err-thrice" ||
  fail "the third signal's line: $(cat "$WORK/err-thrice")"
echo "ok"
