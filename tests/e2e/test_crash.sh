#!/usr/bin/env bash
# SIGKILL a create at random points, 20 times: the ledger always parses, and every record is
# either complete (running, with a backend id) or in a transitional state that reap can repair.
. "$(dirname "$0")/lib.sh"

stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 300ms }
EOF2
# The kill window is as long as one whole create takes here: a sanitizer build on a loaded machine
# is many times slower than a release build on an idle one.
start=$(date +%s%N)
sbx create --profile slow --quiet >/dev/null
window_ms=$((($(date +%s%N) - start) / 1000000))
for round in $(seq 20); do
  # Not through the sbx function: a backgrounded function is a subshell, and killing it would
  # leave the real create running on.
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile slow --quiet \
    >/dev/null 2>&1 &
  pid=$!
  # Somewhere between start-up, the intent commit, the backend call and the outcome commit.
  delay_ms=$((RANDOM % window_ms))
  sleep "$((delay_ms / 1000)).$(printf '%03d' $((delay_ms % 1000)))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  jq empty "$STATE/ledger.json" 2>/dev/null || [ ! -e "$STATE/ledger.json" ] ||
    fail "round $round: ledger does not parse"
done
[ "$(ledger_jq '.sandboxes | length')" -gt 1 ] || fail "no killed create ever committed its intent"
bad=$(ledger_jq '[.sandboxes[] | select(
        (.state == "running" and .backend_id != "") or .state == "creating" | not)] | length')
[ "$bad" = 0 ] || fail "records neither complete nor transitional: $(ledger_jq .sandboxes)"
ls "$STATE"/.ledger.json.tmp.* 2>/dev/null && echo "note: temp files left by killed writers"
echo "states: $(ledger_jq '[.sandboxes[].state] | group_by(.) | map("\(.[0])=\(length)") | join(" ")')"
echo ok
