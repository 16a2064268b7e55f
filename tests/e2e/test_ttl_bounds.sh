#!/usr/bin/env bash
# Issue 13: durations and deadlines stay inside what the ledger can hold (a huge --ttl used to
# write an unreadable expires_at, --ttl 2914000d wrapped to year 0005 and the next reap destroyed
# the sandbox), and one odd record never stops a reap.
. "$(dirname "$0")/lib.sh"

printf 'driver: stub\nttl: { default: 30m }\nstub:\n  root: %s\n' "$WORK/backend" >"$PROFILES/open.yaml"

KEEP=$(sbx create --profile open --ttl 10m --quiet)
for ttl in 9223372036854775807s 2914000d 99999999999999999999999s 36500d1s; do
  expect_code 2 sbx create --profile open --ttl "$ttl"
  expect_contains "$ERR" "--ttl: invalid duration \"$ttl\" (longer than 100 years: at most 36500d)"
done
expect_code 2 sbx create --profile open --ttl 3x
expect_contains "$ERR" "(use 90s, 15m, 2h, 1d, 1h30m)"
# Nothing was recorded, and every command still reads the ledger.
expect_code 0 sbx list -o json
[ "$(jq length <<<"$OUT")" = 1 ] || fail "a refused create left a record: $OUT"
expect_code 0 sbx reap -o json
[ "$(jq '.destroyed' <<<"$OUT")" = 0 ] || fail "reap destroyed something: $OUT"

# The longest ttl is accepted and lands 100 years ahead, not in year 0005.
LONG=$(sbx create --profile open --ttl 36500d --quiet)
year=$(ledger_jq --arg id "$LONG" '.sandboxes[] | select(.id == $id) | .expires_at[0:4]')
[ "$year" -ge "$(($(date -u +%Y) + 99))" ] || fail "36500d gave year $year"

# extend --by past year 9999 is a usage error; the deadline is unchanged.
expect_code 0 sbx extend "$LONG" --to 9999-12-30T00:00:00Z --quiet
expect_code 2 sbx extend "$LONG" --by 36500d
expect_contains "$ERR" "past the year 9999"
expect_code 2 sbx extend "$LONG" --by 9223372036854775807s
expect_contains "$ERR" "longer than 100 years"
[ "$(ledger_jq --arg id "$LONG" '.sandboxes[] | select(.id == $id) | .expires_at')" = \
  9999-12-30T00:00:00Z ] || fail "deadline moved"
expect_code 2 sbx extend "$LONG" --to 10000-01-01T00:00:00Z
expect_code 0 sbx list

# One odd record (a pid no pid_t holds, in a stuck create of this host) used to abort reap with
# "internal error" (exit 1) before anything was reaped: now that pid names no live process, so the
# create is repaired like any interrupted one, and the expired sandbox next to it is reaped.
ODD=$(sbx create --profile open --ttl 10m --quiet)
host=$(ledger_jq --arg id "$ODD" '.sandboxes[] | select(.id == $id) | .owner.host')
jq --arg odd "$ODD" --arg keep "$KEEP" --arg host "$host" '
  .sandboxes |= map(
    if .id == $odd then
      .state = "creating" | .backend_id = "" |
      .history[-1].to = "creating" | .history[-1].time = "2020-01-01T00:00:00Z" |
      .history[-1].actor = "alice@\($host) pid 99999999999999999999999"
    elif .id == $keep then .expires_at = "2020-01-01T00:00:00Z"
    else . end)' "$STATE/ledger.json" >"$WORK/edited.json"
cp "$WORK/edited.json" "$STATE/ledger.json"
expect_code 0 sbx reap -o json
[ "$(jq -r --arg id "$KEEP" '.items[] | select(.id == $id) | .outcome' <<<"$OUT")" = destroyed ] ||
  fail "the expired sandbox was not reaped next to the odd record: $OUT"
[ "$(jq -r --arg id "$ODD" '.items[] | select(.id == $id and .action == "repair") | .outcome' <<<"$OUT")" = destroyed ] ||
  fail "the odd record was not repaired: $OUT"

# The installed binary ignores SANDBOXER_FAKE_NOW (only sandboxer-testclock honours it): a stray
# variable cannot make cron's reap destroy a sandbox that has not expired.
FRESH=$(sbx create --profile open --ttl 10m --quiet)
SANDBOXER_FAKE_NOW=2099-01-01T00:00:00Z expect_code 0 sbx reap -o json
[ "$(jq -r --arg id "$FRESH" '[.items[] | select(.id == $id and .action == "destroy")] | length' <<<"$OUT")" = 0 ] ||
  fail "SANDBOXER_FAKE_NOW moved the installed binary's clock: $OUT"
expect_contains "$ERR" "SANDBOXER_FAKE_NOW is ignored"

# The backend made the sandbox but the outcome commit failed (here: the lock is held past
# --lock-timeout): the error names the sandbox and its backend id, says how to settle it, and no
# "failed" entry misstates a backend that succeeded. reap then settles it: a create that never
# completed is not a sandbox anyone was handed (its caller got an error), so it is destroyed.
stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 4s }
EOF2
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" --lock-timeout 1 create \
  --profile slow --quiet >"$WORK/slow.out" 2>"$WORK/slow.err" &
creator=$!
# Once its intent is recorded (the backend call then takes 4 s), hold the ledger lock past the
# outcome commit's --lock-timeout.
for _ in $(seq 200); do
  [ "$(ledger_jq '[.sandboxes[] | select(.profile.name == "slow")] | length')" = 1 ] && break
  sleep 0.05
done
flock "$STATE/ledger.lock" sleep 6
rc=0
wait "$creator" || rc=$?
[ "$rc" = 5 ] || fail "create whose outcome could not be recorded: exit $rc: $(cat "$WORK/slow.err")"
SLOW=$(ledger_jq '.sandboxes[] | select(.profile.name == "slow") | .id')
expect_contains "$(cat "$WORK/slow.err")" "sandbox $SLOW: the backend created it (backend id"
expect_contains "$(cat "$WORK/slow.err")" "'sandboxer reap' settles it"
[ "$(ledger_jq --arg id "$SLOW" '.sandboxes[] | select(.id == $id) | .state')" = creating ] ||
  fail "the record of a created sandbox is not left creating"
expect_code 0 sbx reap --stuck-after 0s -o json
[ "$(ledger_jq --arg id "$SLOW" '.sandboxes[] | select(.id == $id) | .state')" = destroyed ] ||
  fail "reap did not settle the created sandbox: $OUT"
echo "ok"
