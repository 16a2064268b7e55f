#!/usr/bin/env bash
# 50 creates at once against one ledger: every record is there once and the file parses.
. "$(dirname "$0")/lib.sh"

stub_profile dev <<<'  root: '"$WORK/backend"
pids=()
for i in $(seq 50); do
  sbx create --profile dev --name "c$i" --quiet >"$WORK/out.$i" 2>"$WORK/err.$i" &
  pids+=($!)
done
failed=0
for i in "${!pids[@]}"; do
  wait "${pids[$i]}" || { failed=$((failed + 1)); cat "$WORK/err.$((i + 1))" >&2; }
done
[ "$failed" = 0 ] || fail "$failed creates failed"

jq empty "$STATE/ledger.json" || fail "ledger does not parse"
[ "$(ledger_jq '.sandboxes | length')" = 50 ] || fail "expected 50 records"
[ "$(ledger_jq '[.sandboxes[].id] | unique | length')" = 50 ] || fail "duplicate ids"
[ "$(ledger_jq '[.sandboxes[].name] | unique | length')" = 50 ] || fail "duplicate names"
[ "$(ledger_jq '[.sandboxes[] | select(.state == "running")] | length')" = 50 ] || fail "not all running"
# Every id printed by a create is in the ledger.
for i in $(seq 50); do
  id=$(cat "$WORK/out.$i")
  [ "$(ledger_jq --arg id "$id" '[.sandboxes[] | select(.id == $id)] | length')" = 1 ] ||
    fail "create $i printed $id, which is not in the ledger once"
done

# The same idempotency key from 10 processes at once gives one sandbox.
for i in $(seq 10); do
  sbx create --profile dev --idempotency-key job-42 --quiet >"$WORK/idem.$i" &
done
wait
[ "$(cat "$WORK"/idem.* | sort -u | wc -l)" = 1 ] || fail "idempotency key gave several ids"
[ "$(ledger_jq '[.sandboxes[] | select(.idempotency_key == "job-42")] | length')" = 1 ] ||
  fail "idempotency key recorded twice"
echo ok
