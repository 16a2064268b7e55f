#!/usr/bin/env bash
# The whole lifecycle with the stub driver, checked as a user would: stdout JSON, exit codes, and
# the ledger file.
. "$(dirname "$0")/lib.sh"

stub_profile dev <<<'  root: '"$WORK/backend"

expect_code 0 sbx create --profile dev --name web -o json --label owner=ci
ID=$(jq -r .id <<<"$OUT")
[[ "$ID" =~ ^sbx-[a-z2-7]{12}$ ]] || fail "bad id $ID"
[ "$(jq -r .state <<<"$OUT")" = running ] || fail "not running: $OUT"
[ "$(jq -r .name <<<"$OUT")" = web ] || fail "name: $OUT"
[ "$(jq -r .labels.owner <<<"$OUT")" = ci ] || fail "label: $OUT"
[ "$(jq -r .labels.team <<<"$OUT")" = e2e ] || fail "profile label: $OUT"
[ "$(jq -r .seconds_left <<<"$OUT")" -gt 1790 ] || fail "ttl: $OUT"
[ -d "$WORK/backend/sandboxes/$ID/fs" ] || fail "no backend directory"

# The ledger: permissions, the record, its owner and history.
[ "$(stat -c %a "$STATE")" = 700 ] || fail "state dir mode"
[ "$(stat -c %a "$STATE/ledger.json")" = 600 ] || fail "ledger mode"
[ "$(ledger_jq .schema_version)" = 4 ] || fail "schema_version"
[ "$(ledger_jq ".sandboxes[0].state")" = running ] || fail "ledger state"
[ "$(ledger_jq ".sandboxes[0].owner.pid")" -gt 0 ] || fail "owner pid"
[ "$(ledger_jq '.sandboxes[0].history | map(.to) | join(",")')" = creating,running ] ||
  fail "history: $(ledger_jq .sandboxes[0].history)"

expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 1 ] || fail "list: $OUT"
expect_code 0 sbx list
expect_contains "$OUT" "$ID"
expect_contains "$OUT" "web"

# exec: streams stay apart, the exit code is the command's.
expect_code 0 sbx exec web -- sh -c 'echo to-out; echo to-err >&2; echo state > file.txt'
[ "$OUT" = to-out ] || fail "stdout: $OUT"
[ "$ERR" = to-err ] || fail "stderr: $ERR"
expect_code 3 sbx exec "$ID" -- sh -c 'exit 3'
expect_code 0 sbx exec "$ID" -e GREETING=hi -- sh -c 'echo "$GREETING $SANDBOXER_ID"'
[ "$OUT" = "hi $ID" ] || fail "env: $OUT"
expect_code 127 sbx exec "$ID" -- no-such-program-here

# snapshot, then restore into a new sandbox that has the file written before the snapshot.
expect_code 0 sbx snapshot "$ID" --name base -o json
SNAP=$(jq -r .id <<<"$OUT")
[[ "$SNAP" =~ ^snp- ]] || fail "snapshot id: $OUT"
expect_code 0 sbx exec "$ID" -- sh -c 'echo later > file.txt'
expect_code 0 sbx snapshots -o json
[ "$(jq -r '.[0].name' <<<"$OUT")" = base ] || fail "snapshots: $OUT"
expect_code 0 sbx restore "$ID:base" --name web2 -o json
ID2=$(jq -r .id <<<"$OUT")
[ "$(jq -r .restored_from <<<"$OUT")" = "$SNAP" ] || fail "restored_from: $OUT"
expect_code 0 sbx exec web2 -- cat file.txt
[ "$OUT" = state ] || fail "restored content: $OUT"

# extend: within the cap, then capped, then refused at the cap.
BEFORE=$(sbx status "$ID" -o json | jq -r .expires_at)
expect_code 0 sbx extend "$ID" --by 30m -o json
AFTER=$(jq -r .expires_at <<<"$OUT")
[ $(($(date -d "$AFTER" +%s) - $(date -d "$BEFORE" +%s))) = 1800 ] || fail "extend: $BEFORE -> $AFTER"
expect_code 0 sbx extend "$ID" --by 10h -o json
[ "$(jq -r .expires_at <<<"$OUT")" = "$(jq -r .max_expires_at <<<"$OUT")" ] || fail "cap: $OUT"
expect_contains "$(jq -r '.notices[0]' <<<"$OUT")" "capped"
expect_code 7 sbx extend "$ID" --by 1m

# status shows the backend and the whole history.
expect_code 0 sbx status "$ID" -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "backend state: $OUT"
[ "$(jq -r '.history | map(select(.event | startswith("exec.") | not) | .to + ":" + .event) |
  join(",")' <<<"$OUT")" = \
  creating:created,running:ready,snapshotting:snapshotting,running:snapshotted,running:extended,running:extended ] ||
  fail "history: $OUT"
# Every exec is on record, as evidence: what ran and how it ended.
[ "$(jq -r '.history | map(select(.event == "exec.finished") | .details.exec.exit_code) | join(",")' \
  <<<"$OUT")" = 0,3,0,127,0 ] || fail "exec history: $OUT"
[ "$(jq -r '.history | map(select(.event == "exec.started")) | .[1].details.exec.argv | join(" ")' \
  <<<"$OUT")" = "sh -c exit 3" ] || fail "exec argv: $OUT"

# destroy both; records stay as history, snapshots stay with them.
expect_code 0 sbx destroy "$ID" web2 -o json
[ "$(jq -r 'map(.state) | join(",")' <<<"$OUT")" = destroyed,destroyed ] || fail "destroy: $OUT"
[ ! -e "$WORK/backend/sandboxes/$ID" ] || fail "backend directory left"
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 0 ] || fail "list after destroy: $OUT"
expect_code 0 sbx list --all -o json
[ "$(jq length <<<"$OUT")" = 2 ] || fail "list --all: $OUT"
[ "$(ledger_jq '.sandboxes[0].history[-1].to')" = destroyed ] || fail "ledger after destroy"
expect_code 0 sbx snapshots -o json
[ "$(jq length <<<"$OUT")" = 1 ] || fail "snapshot kept: $OUT"
# Destroying again is not an error: it is already gone.
expect_code 0 sbx destroy "$ID"

# --quiet prints only the id, for scripts.
expect_code 0 sbx create --profile dev --quiet
[[ "$OUT" =~ ^sbx-[a-z2-7]{12}$ ]] || fail "quiet create: $OUT"
echo ok
