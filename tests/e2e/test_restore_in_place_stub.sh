#!/usr/bin/env bash
# restore --in-place through the core with the stub driver: the sandbox keeps its id, name, TTL and
# profile; its files are the snapshot's; the ledger's history records it; a failed swap leaves the
# sandbox as it was.
. "$(dirname "$0")/lib.sh"

stub_profile dev <<<'  root: '"$WORK/backend"

expect_code 0 sbx create --profile dev --name web -o json
ID=$(jq -r .id <<<"$OUT")
EXPIRES=$(jq -r .expires_at <<<"$OUT")
expect_code 0 sbx exec web -- sh -c 'echo before > kept.txt'
expect_code 0 sbx snapshot web --name base -o json
SNAP=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec web -- sh -c 'echo after > kept.txt; echo new > later.txt'

expect_code 0 sbx restore web:base --in-place web -o json
[ "$(jq -r .id <<<"$OUT")" = "$ID" ] || fail "id changed: $OUT"
[ "$(jq -r .name <<<"$OUT")" = web ] || fail "name changed: $OUT"
[ "$(jq -r .expires_at <<<"$OUT")" = "$EXPIRES" ] || fail "TTL changed: $OUT"
[ "$(jq -r .profile.name <<<"$OUT")" = dev ] || fail "profile changed: $OUT"
[ "$(jq -r .state <<<"$OUT")" = running ] || fail "not running: $OUT"
[ "$(jq -r .restored_from <<<"$OUT")" = "$SNAP" ] || fail "restored_from: $OUT"
expect_code 0 sbx exec web -- cat kept.txt
[ "$OUT" = before ] || fail "content after restore: $OUT"
expect_code 1 sbx exec web -- test -e later.txt
[ "$(ledger_jq '.sandboxes | length')" = 1 ] || fail "restore in place made a second record"
# The swap, then the two execs that checked it.
H='.sandboxes[0].history | map(select(.event | startswith("exec.") | not))'
[ "$(ledger_jq "$H"' | .[-2:] | map(.to + ":" + .event) | join(",")')" = \
  creating:restoring,running:restored ] || fail "history: $(ledger_jq .sandboxes[0].history)"
[ "$(ledger_jq "$H"' | .[-1].details.snapshot')" = "$SNAP" ] || fail "no snapshot in history"
[ "$(ledger_jq "$H"' | .[-2].reason')" = "restore in place $SNAP" ] || fail "reason"
[ -z "$(ls -A "$WORK/backend/sandboxes" | grep -v "^$ID\$")" ] || fail "backend left: $(ls -A "$WORK/backend/sandboxes")"

# Options that a new sandbox would take make no sense here.
expect_code 2 sbx restore web:base --in-place web --name other
expect_code 3 sbx restore web:nope --in-place web
expect_code 3 sbx restore web:base --in-place no-such-sandbox

# A failing create leaves the sandbox running on its old files, with the error in its history.
stub_profile flaky <<<'  root: '"$WORK/backend2"'
  fail: { create: 2 }'
expect_code 0 sbx create --profile flaky --name flaky -o json
expect_code 0 sbx exec flaky -- sh -c 'echo one > f.txt'
expect_code 0 sbx snapshot flaky --name s
expect_code 0 sbx exec flaky -- sh -c 'echo two > f.txt'
expect_code 4 sbx restore flaky:s --in-place flaky
expect_contains "$ERR" "injected failure of create"
expect_code 0 sbx status flaky -o json
[ "$(jq -r .state <<<"$OUT")" = running ] || fail "state after a failed restore: $OUT"
expect_contains "$(jq -r '.history[-1].reason' <<<"$OUT")" "restore in place failed"
expect_code 0 sbx exec flaky -- cat f.txt
[ "$OUT" = two ] || fail "a failed restore changed the files: $OUT"
echo ok
