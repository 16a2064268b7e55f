#!/usr/bin/env bash
# Mistakes an operator or a CI script makes that must not pass silently (issue 35.5, 35.7, 35.9):
# an empty --state-dir, a cron reap pointed where there is no ledger (exit 3, nothing created), a
# blank idempotency key, a key reused for another request (exit 7 naming the sandbox); a bare
# `sandboxer` shows help, `help crate` suggests, --lock-timeout takes a duration, and an empty
# reap says so.
. "$(dirname "$0")/lib.sh"
stub_profile dev <<<'  root: '"$WORK/backend"
stub_profile other <<<'  root: '"$WORK/backend2"

expect_code 2 "$SANDBOXER" --state-dir "" list
expect_contains "$ERR" "--state-dir is empty"

# reap where there is no ledger: exit 3, naming where it looked; the directory is not made.
for args in "" "--dry-run" "--no-wait"; do
  expect_code 3 "$SANDBOXER" --state-dir "$WORK/typo" reap $args
  expect_contains "$ERR" "no ledger at $WORK/typo/ledger.json: nothing to reap"
  [ ! -e "$WORK/typo" ] || fail "reap $args created $(ls -A "$WORK/typo")"
done
# --orphans still looks (finding what a lost ledger made is its job).
expect_code 0 "$SANDBOXER" --state-dir "$WORK/lost" --profiles-dir "$PROFILES" reap --orphans --dry-run

# Idempotency keys: blank is refused; the same request gets its sandbox back; another profile or
# --ttl is refused with exit 7 naming the sandbox, unless --reuse-any.
expect_code 2 sbx create --profile dev --idempotency-key "   "
expect_contains "$ERR" "--idempotency-key is empty or blank"
expect_code 0 sbx create --profile dev --ttl 30m --idempotency-key job-1 --quiet
ID=$OUT
expect_code 0 sbx create --profile dev --ttl 30m --idempotency-key job-1 -o json
[ "$(jq -r '[.id, .reused] | join(" ")' <<<"$OUT")" = "$ID true" ] || fail "the same request: $OUT"
expect_code 7 sbx create --profile dev --ttl 10m --idempotency-key job-1
expect_contains "$ERR" "idempotency key \"job-1\" belongs to $ID"
expect_contains "$ERR" "--ttl 30m, not 10m"
expect_code 7 sbx create --profile other --ttl 30m --idempotency-key job-1
expect_contains "$ERR" "made with profile dev"
expect_code 0 sbx create --profile other --ttl 10m --idempotency-key job-1 --reuse-any --quiet
[ "$OUT" = "$ID" ] || fail "--reuse-any: $OUT"
expect_code 0 sbx list -q
[ "$OUT" = "$ID" ] || fail "a refused create left a sandbox: $OUT"

# The first hour's conventions.
expect_code 0 "$SANDBOXER"
expect_contains "$OUT" "Usage: sandboxer [OPTIONS] SUBCOMMAND"
expect_code 2 "$SANDBOXER" help crate
expect_contains "$ERR" 'unknown command "crate"; did you mean create?'
expect_code 0 "$SANDBOXER" help create
expect_contains "$OUT" "Usage: sandboxer create"
expect_code 0 sbx --lock-timeout 30s list -q
expect_code 0 sbx --lock-timeout 5 list -q
expect_code 2 sbx --lock-timeout 3x list
expect_contains "$ERR" '--lock-timeout: invalid duration "3x" (use 90s, 15m'
expect_code 0 sbx reap --dry-run
[ "$OUT" = "nothing due: a reap now would do nothing" ] || fail "an empty dry run said: $OUT"
expect_code 0 sbx reap -q
[ -z "$OUT" ] || fail "reap -q with nothing due printed: $OUT"
# A profile given by a relative path is recorded by its absolute one: the record outlives the
# directory the command ran in.
stub_profile rel </dev/null
ID=$(cd "$WORK" && sbx create --profile ./profiles/rel.yaml --quiet)
[ "$(record "$ID" .profile.path)" = "$PROFILES/rel.yaml" ] ||
  fail "stored profile path: $(record "$ID" .profile.path)"
echo ok
