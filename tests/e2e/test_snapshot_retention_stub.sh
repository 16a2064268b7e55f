#!/usr/bin/env bash
# snapshots.keep in a profile: a sandbox keeps its N newest snapshots; a new one beyond N removes
# the oldest through the driver, and the sandbox's history says so. Without it, all are kept.
. "$(dirname "$0")/lib.sh"

stub_profile kept <<<'  root: '"$WORK/backend"
printf 'snapshots: { keep: 2 }\n' >>"$PROFILES/kept.yaml"

expect_code 0 sbx create --profile kept --name box -o json
ID=$(jq -r .id <<<"$OUT")
for n in 1 2 3; do
  expect_code 0 sbx exec box -- sh -c "echo $n > n.txt"
  expect_code 0 sbx snapshot box --name "s$n" -o json
  eval "SNAP$n=\$(jq -r .id <<<\"\$OUT\")"
done
expect_code 0 sbx snapshots box -o json
[ "$(jq -r 'map(.name) | join(",")' <<<"$OUT")" = s2,s3 ] || fail "kept: $OUT"
[ ! -e "$WORK/backend/snapshots/$ID-s1" ] || fail "the driver still has s1"
[ -d "$WORK/backend/snapshots/$ID-s3" ] || fail "the driver lost s3"
REASON=$(ledger_jq '.sandboxes[0].history[-1].reason')
[ "$REASON" = "snapshot $SNAP1 (s1) removed: snapshots.keep 2" ] || fail "history: $REASON"
[ "$(ledger_jq '.sandboxes[0].history[-1].details.snapshot')" = "$SNAP1" ] || fail "details"
expect_code 3 sbx restore box:s1 --name gone

# A restored sandbox lives by the same rule.
expect_code 0 sbx restore box:s3 --name copy -o json
for n in 4 5 6; do expect_code 0 sbx snapshot copy --name "c$n"; done
expect_code 0 sbx snapshots copy -o json
[ "$(jq -r 'map(.name) | join(",")' <<<"$OUT")" = c5,c6 ] || fail "restored sandbox kept: $OUT"

# Without snapshots.keep, every snapshot stays.
stub_profile all <<<'  root: '"$WORK/backend"
expect_code 0 sbx create --profile all --name all
for n in 1 2 3; do expect_code 0 sbx snapshot all --name "a$n"; done
expect_code 0 sbx snapshots all -o json
[ "$(jq length <<<"$OUT")" = 3 ] || fail "without keep: $OUT"

# A bad value names the file and line.
stub_profile bad <<<'  root: '"$WORK/backend"
printf 'snapshots: { keep: 0 }\n' >>"$PROFILES/bad.yaml"
expect_code 2 sbx create --profile bad
expect_contains "$ERR" "bad.yaml:"
expect_contains "$ERR" "snapshots.keep: expected a whole number from 1 to 10000"
echo ok
