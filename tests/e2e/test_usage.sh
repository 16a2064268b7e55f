#!/usr/bin/env bash
# `sandboxer usage` (docs/usage.md) on the stub with the test clock, against intervals known
# beforehand: a sandbox created at T0, paused at +1h, resumed at +3h and destroyed at +4h ran
# 7200 s and was paused 7200 s, and costs what its profile's `cost` says; another still running
# runs until now. Then the groups (--by label:team, driver, profile), the table, -o csv (and every
# other command refusing it), the default window, bad input (exit 2), that it writes nothing, that
# a short window never opens the journal segments of days before it, and the pruned_before warning.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"
unset SANDBOXER_LEDGER

at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
NOW=2026-12-02T15:00:00Z
now() { at "$NOW" "$@"; }
DAY='--from 2026-12-02T00:00:00Z --to 2026-12-03T00:00:00Z'

stub_profile priced <<<'  latency: {}'
printf 'cost: { per_hour: 0.5, paused_per_hour: 0.1, currency: EUR }\n' >>"$PROFILES/priced.yaml"
stub_profile free <<<'  latency: {}'
sed -i 's/^ttl: .*/ttl: { default: 8h, max: 1d }/' "$PROFILES/priced.yaml" "$PROFILES/free.yaml"

# Four days of history before the window: one 30-minute sandbox a day, Nov 22..25 (one journal
# segment each).
for d in 22 23 24 25; do
  expect_code 0 at "2026-11-${d}T12:00:00Z" create --profile free --name "old$d" --label team=old --quiet
  expect_code 0 at "2026-11-${d}T12:30:00Z" destroy "old$d"
done

# The known intervals.
expect_code 0 at 2026-12-02T10:00:00Z create --profile priced --name a --label team=infra -o json
A=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:00:00Z create --profile free --name b --label team=web --quiet
expect_code 0 at 2026-12-02T11:00:00Z pause a
expect_code 0 at 2026-12-02T13:00:00Z resume a
expect_code 0 at 2026-12-02T14:00:00Z destroy a
[ "$(record "$A" '[.history[].event] | join(" ")')" = \
  "created ready pausing paused resuming resumed destroying destroyed" ] ||
  fail "a's history: $(record "$A" '[.history[].event]')"

# --- the numbers: a alone (by label), and the total with b running since 10:00 (5 hours by now)
snapshot_state() { find "$STATE" -type f ! -name '*.lock' -exec sha256sum {} + | sort; }
BEFORE=$(snapshot_state)
expect_code 0 now usage $DAY --by label:team -o json
USAGE=$OUT
[ "$(jq -c '.groups[] | select(.key == "infra") | [.count, .running_seconds, .paused_seconds, .total_seconds, .uncosted, .cost]' <<<"$USAGE")" = \
  '[1,7200,7200,14400,0,{"EUR":1.2}]' ] || fail "a: 7200 s running, 7200 s paused, 1.2 EUR expected: $USAGE"
[ "$(jq -c '.groups[] | select(.key == "web") | [.count, .running_seconds, .paused_seconds, .uncosted, .cost]' <<<"$USAGE")" = \
  '[1,18000,0,1,{}]' ] || fail "b: 18000 s running, uncosted expected: $USAGE"
[ "$(jq -c '[.groups[].key]' <<<"$USAGE")" = '["infra","web"]' ] || fail "groups: $USAGE"
[ "$(jq -c '.total | [.count, .running_seconds, .paused_seconds, .total_seconds, .uncosted, .cost]' <<<"$USAGE")" = \
  '[2,25200,7200,32400,1,{"EUR":1.2}]' ] || fail "total: $USAGE"
[ "$(jq -c '[.from, .to, .now, .by, .pruned_before, .warnings]' <<<"$USAGE")" = \
  '["2026-12-02T00:00:00Z","2026-12-03T00:00:00Z","2026-12-02T15:00:00Z","label:team",null,[]]' ] ||
  fail "window: $USAGE"
# Read-only: nothing in the state directory changed (no history entry, no event).
[ "$(snapshot_state)" = "$BEFORE" ] || fail "usage changed the state directory"

# Clipped: from 12:00 to 13:30, a was paused for an hour, then ran for 30 minutes.
expect_code 0 now usage --from 2026-12-02T12:00:00Z --to 2026-12-02T13:30:00Z --by label:team -o json
[ "$(jq -c '.groups[] | select(.key == "infra") | [.running_seconds, .paused_seconds, .cost.EUR]' <<<"$OUT")" = \
  '[1800,3600,0.35]' ] || fail "clipped: $OUT"

# Other groups.
expect_code 0 now usage $DAY --by driver -o json
[ "$(jq -c '[.groups[] | [.key, .count, .total_seconds]]' <<<"$OUT")" = '[["stub",2,32400]]' ] ||
  fail "--by driver: $OUT"
expect_code 0 now usage $DAY --by profile -o json
[ "$(jq -c '[.groups[] | [.key, .running_seconds]]' <<<"$OUT")" = '[["free",18000],["priced",7200]]' ] ||
  fail "--by profile: $OUT"
expect_code 0 now usage $DAY --by owner -o json
[ "$(jq -c '[.groups[] | [.key, .count]]' <<<"$OUT")" = "[[\"$(id -un)\",2]]" ] || fail "--by owner: $OUT"
expect_code 0 now usage $DAY --by label:nosuch -o json
[ "$(jq -c '[.groups[] | [.key, .count]]' <<<"$OUT")" = '[[null,2]]' ] || fail "--by a missing label: $OUT"

# --- the table (hours, a TOTAL row), and CSV
expect_code 0 now usage $DAY --by label:team
TABLE=$OUT
expect_contains "$TABLE" "from 2026-12-02T00:00:00Z to 2026-12-02T15:00:00Z"
[ "$(grep '^LABEL:TEAM' <<<"$TABLE" | tr -s ' ')" = \
  "LABEL:TEAM SANDBOXES RUNNING (h) PAUSED (h) TOTAL (h) UNCOSTED COST" ] || fail "table header: $TABLE"
[ "$(grep '^infra' <<<"$TABLE" | tr -s ' ')" = "infra 1 2.00 2.00 4.00 0 1.20 EUR" ] || fail "table: $TABLE"
[ "$(grep '^web' <<<"$TABLE" | tr -s ' ')" = "web 1 5.00 0.00 5.00 1 -" ] || fail "table: $TABLE"
[ "$(grep '^TOTAL' <<<"$TABLE" | tr -s ' ')" = "TOTAL 2 7.00 2.00 9.00 1 1.20 EUR" ] || fail "table: $TABLE"
expect_code 0 now usage $DAY
[ "$(grep -c . <<<"$OUT")" = 3 ] || fail "without --by: the window, the header, TOTAL: $OUT"
expect_code 0 now usage $DAY --by label:team -o csv
[ "$OUT" = "key,count,running_hours,paused_hours,total_hours,uncosted,cost_EUR
infra,1,2.0000,2.0000,4.0000,0,1.2000
web,1,5.0000,0.0000,5.0000,1,0.0000
TOTAL,2,7.0000,2.0000,9.0000,1,1.2000" ] || fail "csv: $OUT"
expect_code 0 now usage $DAY -o yaml
expect_contains "$OUT" "running_seconds: 25200"

# -o csv is usage's alone: any other command refuses it before it does anything.
expect_code 2 now list -o csv
expect_contains "$ERR" "-o csv: list does not print CSV (only usage does)"
expect_code 2 now -o csv create --profile free --name never
expect_code 0 now list -a -q
[ "$(grep -c . <<<"$OUT")" = 6 ] || fail "create -o csv made a sandbox: $OUT"

# --- the default window: the last 7 days, so none of the old days' sandboxes
expect_code 0 now usage -o json
[ "$(jq -c '[.from, .to, .total.count]' <<<"$OUT")" = '["2026-11-25T15:00:00Z","2026-12-02T15:00:00Z",2]' ] ||
  fail "default window: $OUT"
expect_code 0 now usage --since 30d -o json
[ "$(jq -c '[.total.count, .total.running_seconds]' <<<"$OUT")" = '[6,32400]' ] ||
  fail "--since 30d: 4 old sandboxes of 1800 s more: $OUT"
expect_code 0 now usage --since 2026-11-24T00:00:00Z --to 2026-11-25T00:00:00Z -o json
[ "$(jq -c '[.total.count, .total.running_seconds]' <<<"$OUT")" = '[1,1800]' ] || fail "--since TIME --to: $OUT"

# --- bad input: exit 2, said plainly
expect_code 2 now usage --since banana
expect_contains "$ERR" '--since "banana": expected a duration back from now'
expect_code 2 now usage --from yesterday
expect_contains "$ERR" '--from "yesterday": expected an RFC 3339 time'
expect_code 2 now usage --from 2026-12-02T12:00:00Z --to 2026-12-02T11:00:00Z
expect_contains "$ERR" "the window from 2026-12-02T12:00:00Z to 2026-12-02T11:00:00Z is empty"
expect_code 2 now usage --by team
expect_contains "$ERR" '--by "team": expected profile, driver, owner or label:KEY'
expect_code 2 now usage --by profiles
expect_contains "$ERR" "did you mean profile?"
expect_code 2 now usage --since 1d --from 2026-12-02T00:00:00Z
expect_code 2 now usage -o xml

# --- streaming: a window of the last day never opens the segments of Nov 22..24 (only Nov 25's,
# the newest before the window, as a margin). They become symbolic links, which the journal
# refuses to open even for root: a report that opened one would fail.
[ "$(ls "$STATE/journal" | paste -sd' ')" = \
  "segment-000001.jsonl segment-000002.jsonl segment-000003.jsonl segment-000004.jsonl segment-000005.jsonl" ] ||
  fail "one segment a day expected: $(ls "$STATE/journal")"
for n in 1 2 3; do
  mv "$STATE/journal/segment-00000$n.jsonl" "$WORK/moved-$n"
  ln -s "$WORK/moved-$n" "$STATE/journal/segment-00000$n.jsonl"
done
expect_code 0 now usage --since 1d -o json
[ "$(jq -c '[.total.count, .total.running_seconds, .total.paused_seconds]' <<<"$OUT")" = '[2,25200,7200]' ] ||
  fail "--since 1d over the linked segments: $OUT"
[ -z "$ERR" ] || fail "--since 1d said something: $ERR"
expect_code 1 now usage --since 30d -o json
expect_contains "$ERR" "refusing journal segment $STATE/journal/segment-00000"
expect_contains "$ERR" "it is a symbolic link"
for n in 1 2 3; do
  rm "$STATE/journal/segment-00000$n.jsonl"
  mv "$WORK/moved-$n" "$STATE/journal/segment-00000$n.jsonl"
done
expect_code 0 now usage --since 30d -o json

# --- pruned history: a window reaching before it warns (exit 0); one after it does not
expect_code 0 now reap --keep-history 8d -o json
[ "$(jq -r .pruned <<<"$OUT")" = 3 ] || fail "reap --keep-history 8d: $OUT"
expect_code 0 now usage --since 30d -o json
[ "$(jq -c '[.pruned_before, .total.count, (.warnings | length)]' <<<"$OUT")" = '["2026-11-24T12:30:00Z",3,1]' ] ||
  fail "after the prune: $OUT"
expect_contains "$ERR" "records closed up to 2026-11-24T12:30:00Z were pruned from the ledger"
expect_code 0 now usage --since 7d -o json
[ "$(jq -c '[.pruned_before, .warnings]' <<<"$OUT")" = '["2026-11-24T12:30:00Z",[]]' ] || fail "after the prune, 7d: $OUT"
[ -z "$ERR" ] || fail "a window after pruned_before warned: $ERR"

# A label value with a comma and quotes is one CSV cell.
expect_code 0 now create --profile free --name odd --label 'team=a,"b"' --quiet
expect_code 0 at 2026-12-02T16:00:00Z usage --since 1h --by label:team -o csv
expect_contains "$OUT" '"a,""b""",1,1.0000,0.0000,1.0000,1'
echo "ok: usage"
