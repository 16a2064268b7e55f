#!/usr/bin/env bash
# The idle policy and ttl.on_paused_max through reap, on the stub with the test clock
# (docs/pause.md "Idle"): activity is what the history records, reap's plan says "idle since T
# (last exec at T)", a saved plan is not executed on a sandbox used since, on_idle pause /
# snapshot / destroy, and on_paused_max: snapshot with a driver that cannot snapshot paused.
. "$(dirname "$0")/lib.sh"
command -v jq >/dev/null || skip "jq is missing"
SANDBOXER="$SANDBOXER_TESTCLOCK"
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }

idle_profile() { # NAME TTL [STUB_SECTION]
  stub_profile "$1" <<<"  ${3:-latency: {\}}"
  sed -i "s/^ttl: .*/ttl: $2/" "$PROFILES/$1.yaml"
}
idle_profile parking '{ default: 8h, max: 1d, idle: 1h, on_idle: pause }'
printf 'events: [ { type: jsonl, path: "%s" } ]\n' "$WORK/events.jsonl" >>"$PROFILES/parking.yaml"
idle_profile keeping '{ default: 8h, max: 1d, idle: 1h, on_idle: snapshot }'
idle_profile ending '{ default: 8h, max: 1d, idle: 1h }'
idle_profile frozen '{ default: 8h, max: 1d, paused_max: 2h, on_paused_max: snapshot }' \
  'snapshot_paused: false'

expect_code 0 at 2026-12-02T10:00:00Z create --profile parking --name parked -o json
PARKED=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:00:00Z create --profile keeping --name kept -o json
KEPT=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:00:00Z create --profile ending --name ended -o json
ENDED=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:30:00Z exec parked -- sh -c 'echo work > work.txt'

# An hour after creation the unused two are idle; the one used at 10:30 is not, yet.
expect_code 0 at 2026-12-02T11:01:00Z reap --dry-run -o json
[ "$(jq -r --arg id "$PARKED" '[.items[] | select(.id == $id)] | length' <<<"$OUT")" = 0 ] ||
  fail "a sandbox used 31 minutes ago is planned: $OUT"
[ "$(jq -r --arg id "$KEPT" '.items[] | select(.id == $id) | .action' <<<"$OUT")" = \
  snapshot+destroy ] || fail "on_idle: snapshot is not planned: $OUT"
[ "$(jq -r --arg id "$ENDED" '.items[] | select(.id == $id) | "\(.action): \(.reason)"' \
  <<<"$OUT")" = \
  "destroy: idle since 2026-12-02T10:00:00Z (no activity since it started); ttl.idle 1h" ] ||
  fail "on_idle: destroy plan: $OUT"

# A plan made while it was idle is not executed once it has been used since.
expect_code 0 at 2026-12-02T11:31:00Z reap --dry-run -o json
printf '%s\n' "$OUT" >"$WORK/plan.json"
[ "$(jq -r --arg id "$PARKED" '.items[] | select(.id == $id) | "\(.action): \(.reason)"' \
  "$WORK/plan.json")" = \
  "pause: idle since 2026-12-02T10:30:00Z (last exec at 2026-12-02T10:30:00Z); ttl.idle 1h" ] ||
  fail "on_idle: pause plan: $OUT"
expect_code 0 at 2026-12-02T11:32:00Z exec parked -- cat work.txt
expect_code 0 at 2026-12-02T11:33:00Z reap --plan "$WORK/plan.json" -o json
[ "$(jq -r --arg id "$PARKED" '.items[] | select(.id == $id) | .outcome' <<<"$OUT")" = skipped ] ||
  fail "a plan paused a sandbox used since: $OUT"
[ "$(record "$PARKED" .state)" = running ] || fail "the used sandbox is not running"
# The others of the plan ran: snapshot then destroy, and destroy.
[ "$(jq -r '"\(.destroyed) \(.snapshotted) \(.paused)"' <<<"$OUT")" = "2 1 0" ] ||
  fail "the plan's counts: $OUT"
[ "$(record "$KEPT" .state) $(record "$ENDED" .state)" = "destroyed destroyed" ] ||
  fail "idle sandboxes left: $(record "$KEPT" .state) $(record "$ENDED" .state)"
[ "$(record "$ENDED" '.history[-1].reason')" = idle ] || fail "destroyed entry: not 'idle'"
expect_code 0 at 2026-12-02T11:34:00Z snapshots kept -o json
[ "$(jq -r '.[].name' <<<"$OUT")" = reap-idle ] || fail "no reap-idle snapshot: $OUT"
expect_code 0 at 2026-12-02T11:35:00Z restore "$KEPT:reap-idle" --name revived -o json
expect_code 0 at 2026-12-02T11:35:00Z exec revived -- true

# An hour after its last use, the one that was used is paused by reap, for being idle.
expect_code 0 at 2026-12-02T12:33:00Z reap -o json
[ "$(jq -r '.paused' <<<"$OUT")" = 1 ] || fail "reap did not pause the idle sandbox: $OUT"
[ "$(record "$PARKED" '"\(.state) \(.pause.cause)"')" = "paused idle" ] ||
  fail "not paused for idle: $(record "$PARKED" .pause)"
[ "$(record "$PARKED" '.history[] | select(.event == "pausing") | .reason')" = \
  "idle since 2026-12-02T11:32:00Z (last exec at 2026-12-02T11:32:00Z); ttl.idle 1h" ] ||
  fail "pausing entry: $(record "$PARKED" '.history[] | select(.event == "pausing")')"
jq -s -e 'map(select(.type == "dev.sandboxer.sandbox.pausing")) |
  length == 1 and .[0].data.details.idle.last == "exec"' "$WORK/events.jsonl" >/dev/null ||
  fail "the pausing CloudEvent does not say why: $(cat "$WORK/events.jsonl")"
# A paused one is not judged idle again; its file is intact after a resume.
ENTRIES=$(record "$PARKED" '.history | length')
expect_code 0 at 2026-12-02T15:00:00Z reap -o json
[ "$(record "$PARKED" '.history | length')" = "$ENTRIES" ] || fail "reap touched a paused one"
expect_code 0 at 2026-12-02T15:01:00Z resume parked
expect_code 0 at 2026-12-02T15:01:00Z exec parked -- cat work.txt
[ "$OUT" = work ] || fail "the file after the idle pause: $OUT"

# on_paused_max: snapshot, on a stub that (like e2b) cannot snapshot a paused sandbox: reap
# resumes it for the snapshot, then destroys it.
expect_code 0 at 2026-12-02T10:00:00Z create --profile frozen --name frozen -o json
FROZEN=$(jq -r .id <<<"$OUT")
expect_code 0 at 2026-12-02T10:00:00Z exec frozen -- sh -c 'echo kept > kept.txt'
expect_code 0 at 2026-12-02T10:10:00Z pause frozen
expect_code 0 at 2026-12-02T12:11:00Z reap -o json
[ "$(record "$FROZEN" .state)" = destroyed ] || fail "paused past paused_max, not destroyed: $OUT"
[ "$(record "$FROZEN" '[.history[].event] | map(select(. == "snapshot.failed" or
  . == "resumed" or . == "snapshotted" or . == "destroyed")) | join(" ")')" = \
  "snapshot.failed resumed snapshotted destroyed" ] ||
  fail "history of the snapshot before the destroy: $(record "$FROZEN" '[.history[].event]')"
expect_code 0 at 2026-12-02T12:12:00Z restore "$FROZEN:reap-paused-max" --name thawed -o json
expect_code 0 at 2026-12-02T12:12:00Z exec thawed -- cat kept.txt
[ "$OUT" = kept ] || fail "the snapshot taken before the destroy lost the file: $OUT"

expect_code 0 sbx ledger verify
expect_code 0 at 2026-12-02T12:13:00Z destroy --all --yes
