#!/usr/bin/env bash
# SIGKILL a create at random points, 20 times: the ledger always parses, and every record is
# either complete (running, with a backend id) or in a transitional state that reap can repair.
. "$(dirname "$0")/lib.sh"

stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 300ms }
EOF2
ledger_parses() {
  jq empty "$STATE/ledger.json" 2>/dev/null || [ ! -e "$STATE/ledger.json" ] ||
    fail "round $1: ledger does not parse"
}
kill_creates_at_random slow 20 ledger_parses
[ "$(ledger_jq '.sandboxes | length')" -gt 1 ] || fail "no killed create ever committed its intent"
bad=$(ledger_jq '[.sandboxes[] | select(
        (.state == "running" and .backend_id != "") or .state == "creating" | not)] | length')
[ "$bad" = 0 ] || fail "records neither complete nor transitional: $(ledger_jq .sandboxes)"
ls "$STATE"/.ledger.json.tmp.* 2>/dev/null && echo "note: temp files left by killed writers"
echo "states: $(ledger_jq '[.sandboxes[].state] | group_by(.) | map("\(.[0])=\(length)") | join(" ")')"
echo ok
