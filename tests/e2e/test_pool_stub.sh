#!/usr/bin/env bash
# Warm pools on the stub (docs/pools.md): fill, claim (its history proves the member was never
# used), list hiding members, --no-pool, 20 concurrent creates claiming each member once, a member
# killed in the backend skipped at claim, max_age and spec-hash recycling, reap's refill (and its
# dry run's planned fill), a parallel fill, and SIGKILL during fill and during claim settled by reap
# with nothing lost or doubled.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"

stub_profile warm <<<'  latency: {}'
printf 'pool: { size: 3, max_age: 1h }\n' >>"$PROFILES/warm.yaml"
printf 'events: [ { type: jsonl, path: "%s" } ]\n' "$WORK/events.jsonl" >>"$PROFILES/warm.yaml"
members() { ledger_jq '[.sandboxes[] | select(.state == "pooled")] | length'; }

expect_code 0 sbx pool fill --profile warm -o json
[ "$(jq -r '.[0] | "\(.size) \(.made) \(.errors | length)"' <<<"$OUT")" = "3 3 0" ] ||
  fail "pool fill: $OUT"
[ "$(members)" = 3 ] || fail "members after fill: $(members)"
expect_code 0 sbx list -q
[ -z "$OUT" ] || fail "list shows pool members: $OUT"
expect_code 0 sbx list --state pooled -q
[ "$(wc -l <<<"$OUT")" = 3 ] || fail "list --state pooled: $OUT"
# A second fill makes nothing: the pool is full.
expect_code 0 sbx pool fill --profile warm -o json
[ "$(jq -r '.[0] | "\(.ready) \(.made)"' <<<"$OUT")" = "3 0" ] || fail "a full pool filled: $OUT"

# A claim: the member's history says it was made ahead, pooled, then claimed by this create.
OLDEST=$(ledger_jq -r '[.sandboxes[] | select(.state == "pooled")] | sort_by(.created_at) | .[0].id')
expect_code 0 sbx create --profile warm --name first --ttl 20m --label job=1 -o json
[ "$(jq -r '"\(.id) \(.state) \(.name) \(.labels.job)"' <<<"$OUT")" = "$OLDEST running first 1" ] ||
  fail "the claim: $OUT (the oldest member was $OLDEST)"
[ "$(jq -r '.expires_at' <<<"$OUT")" != null ] || fail "no deadline from the claim"
[ "$(record "$OLDEST" '[.history[].event] | join(" ")')" = "created pooled claimed" ] ||
  fail "history of a claimed member: $(record "$OLDEST" '[.history[].event]')"
[ "$(record "$OLDEST" '.pool.claimed_by != null and .pool.pooled_at != null')" = true ] ||
  fail "pool membership: $(record "$OLDEST" .pool)"
jq -s -e 'map(select(.type == "dev.sandboxer.sandbox.claimed")) | length == 1' \
  "$WORK/events.jsonl" >/dev/null || fail "no claimed CloudEvent"
expect_code 0 sbx exec first -- sh -c 'echo used > mark'
# --no-pool creates cold, and leaves the pool alone.
expect_code 0 sbx create --profile warm --no-pool --name cold -o json
[ "$(jq -r '.pool' <<<"$OUT")" = null ] || fail "--no-pool claimed: $OUT"
[ "$(members)" = 2 ] || fail "members after a cold create: $(members)"

# A member killed in the backend is destroyed at claim and the next one taken.
expect_code 0 sbx pool fill --profile warm --quiet
DEAD=$(ledger_jq -r '[.sandboxes[] | select(.state == "pooled")] | sort_by(.created_at) | .[0].id')
rm -rf "$(record "$DEAD" .info.path)"
expect_code 0 sbx create --profile warm --name second -o json
SECOND=$(jq -r .id <<<"$OUT")
[ "$SECOND" != "$DEAD" ] && [ "$(jq -r .pool.claimed_by <<<"$OUT")" != null ] ||
  fail "a dead member was handed over: $OUT"
[ "$(record "$DEAD" .state)" = destroyed ] || fail "the dead member: $(record "$DEAD" .state)"
expect_contains "$(record "$DEAD" '.history[-1].reason')" "pool member dead at claim"

# 20 creates at once against a pool of 3: each member claimed once, the rest created cold.
expect_code 0 sbx pool fill --profile warm --quiet
BEFORE=$(ledger_jq -r '[.sandboxes[] | select(.state == "pooled") | .id] | sort | join(" ")')
for i in $(seq 20); do
  sbx create --profile warm --name "c$i" -o json >"$WORK/c$i.json" 2>"$WORK/c$i.err" &
done
wait
CLAIMED=$(cat "$WORK"/c*.json | jq -r 'select(.pool.claimed_by != null) | .id' | sort)
[ "$(wc -l <<<"$CLAIMED")" = 3 ] || fail "claims of 3 members by 20 creates: $CLAIMED"
[ "$(tr '\n' ' ' <<<"$CLAIMED" | sed 's/ $//')" = "$BEFORE" ] || fail "claimed $CLAIMED of $BEFORE"
[ "$(cat "$WORK"/c*.json | jq -r .id | sort -u | wc -l)" = 20 ] || fail "a sandbox handed out twice"
[ "$(members)" = 0 ] || fail "members left: $(members)"

# reap refills; members past max_age, or made with an older spec, are replaced.
SANDBOXER_PLAIN=$SANDBOXER
SANDBOXER=$SANDBOXER_TESTCLOCK
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
# A dry run lists the fill it would make, and makes nothing.
expect_code 0 at 2026-12-02T10:00:00Z reap --dry-run -o json
[ "$(jq -r '[.items[] | select(.action == "fill")][0] | "\(.id | sub("@.*"; "@")) \(.outcome) \(.reason)"' <<<"$OUT")" = \
  "warm@ planned would make 3, recycle 0 (ready 0 of 3, 0 being made)" ] ||
  fail "reap --dry-run's fill: $OUT"
[ "$(members)" = 0 ] || fail "a dry run made members: $(members)"
expect_code 0 at 2026-12-02T10:00:00Z reap -o json
[ "$(jq -r .filled <<<"$OUT")" = 3 ] || fail "reap did not refill: $OUT"
OLD_MEMBERS=$(ledger_jq -r '[.sandboxes[] | select(.state == "pooled") | .id] | sort | join(" ")')
expect_code 0 at 2026-12-02T11:01:00Z reap -o json
[ "$(jq -r '[.items[] | select(.action == "destroy" and .outcome == "destroyed")] | length' \
  <<<"$OUT") $(jq -r .filled <<<"$OUT")" = "3 3" ] || fail "max_age recycling: $OUT"
for id in $OLD_MEMBERS; do
  expect_contains "$(record "$id" '.history[-2].reason')" "pool.max_age ran out"
done
sed -i 's/^  latency: {}/  latency: { create: 1ms }/' "$PROFILES/warm.yaml"
expect_code 0 at 2026-12-02T11:02:00Z pool status -o json
[ "$(jq -r '.[0] | "\(.ready) \(.stale)"' <<<"$OUT")" = "0 3" ] || fail "stale members: $OUT"
expect_code 0 at 2026-12-02T11:02:00Z reap --dry-run -o json
expect_contains "$(jq -r '.items[] | select(.action == "fill") | .reason' <<<"$OUT")" \
  "would make 3, recycle 3"
expect_code 0 at 2026-12-02T11:02:00Z pool fill --parallel 3 -o json
[ "$(jq -r '.[0] | "\(.recycled) \(.made)"' <<<"$OUT")" = "3 3" ] || fail "spec recycling: $OUT"
SANDBOXER=$SANDBOXER_PLAIN

# SIGKILL during fills and during claims: every member is pooled, claimed or settled by reap;
# nothing is handed out twice and no backend directory is left without a live record.
sed -i 's/^  latency: .*/  latency: { create: 300ms }/' "$PROFILES/warm.yaml"
for round in $(seq 6); do
  if ((round % 2)); then verb=(pool fill --profile warm); else verb=(create --profile warm); fi
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" "${verb[@]}" >/dev/null 2>&1 &
  pid=$!
  sleep "0.$((RANDOM % 6))$((RANDOM % 10))"
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  ledger_jq . >/dev/null || fail "round $round: the ledger does not parse"
done
expect_code 0 sbx reap --stuck-after 0s
[ "$(ledger_jq '[.sandboxes[] | select(.state == "creating")] | length')" = 0 ] ||
  fail "reap left members creating"
[ "$(ledger_jq '[.sandboxes[] | select(.pool.claimed_at != null) | .id] | length')" = \
  "$(ledger_jq '[.sandboxes[] | select(.pool.claimed_at != null) | .id] | unique | length')" ] ||
  fail "a member claimed twice"
for dir in "$STATE"/drivers/stub/sandboxes/*; do
  [ -e "$dir" ] || continue
  id=$(basename "$dir")
  case $(record "$id" .state) in running | pooled) ;; *) fail "backend $id left: $(record "$id" .state)" ;; esac
done
expect_code 0 sbx ledger verify
expect_code 0 sbx destroy --all --yes
