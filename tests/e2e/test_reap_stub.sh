#!/usr/bin/env bash
# reap with the stub driver at chosen instants (SANDBOXER_FAKE_NOW): expiry and skew, dry run and
# saved plans, --max-destroy, a failing destroy retried with backoff, a create killed mid-call and
# repaired, orphans reported then destroyed, a second reaper, metrics and retention.
# Moves the clock with SANDBOXER_FAKE_NOW, which only the test build honours.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"

T0=2026-12-02T12:00:00Z
# at TIME ARGS...: the binary with its clock at TIME.
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }
state_of() { ledger_jq --arg id "$1" '.sandboxes[] | select(.id == $id) | .state'; }

stub_profile dev <<<"  root: $WORK/backend"
stub_profile flaky <<EOF2
  root: $WORK/backend
  fail: { destroy: 1 }
EOF2

# Caps are reported in every output and in the history, never silently applied.
expect_code 0 at $T0 create --profile dev --ttl 5h
expect_contains "$OUT" "notice:"
expect_contains "$OUT" "ttl 5h capped to 2h (ttl.max of profile dev)"
expect_code 0 at $T0 create --profile dev --ttl 5h --quiet
expect_contains "$ERR" "ttl 5h capped to 2h"
CAPPED=$OUT
[ "$(record "$CAPPED" '.policy | "\(.ttl) \(.ttl_requested) \(.capped)"')" = \
  "2h 5h ttl 5h capped to 2h (ttl.max of profile dev)" ] || fail "cap not in the creation policy"
expect_code 7 at $T0 extend "$CAPPED" --by 1h --quiet
expect_contains "$ERR" "maximum"
EXT=$(at $T0 create --profile dev --ttl 1h --quiet)
expect_code 0 at $T0 extend "$EXT" --by 5h --quiet
[ "$OUT" = 2026-12-02T14:00:00Z ] || fail "extend --quiet: $OUT"
expect_contains "$ERR" "capped to 2026-12-02T14:00:00Z"
expect_code 0 at $T0 destroy "$CAPPED" "$EXT" "$(ledger_jq -r '.sandboxes[0].id')"

SHORT=$(at $T0 create --profile dev --ttl 10m --quiet)
LONG=$(at $T0 create --profile dev --ttl 1h --quiet)

# list --expired and --expiring-within, by the same clock.
expect_code 0 at 2026-12-02T12:11:00Z list --expired -o json
[ "$(jq -r 'map(.id) | join(",")' <<<"$OUT")" = "$SHORT" ] || fail "list --expired: $OUT"
expect_code 0 at 2026-12-02T12:05:00Z list --expiring-within 10m -o json
[ "$(jq -r 'map(.id) | join(",")' <<<"$OUT")" = "$SHORT" ] || fail "--expiring-within: $OUT"
expect_code 0 at 2026-12-02T12:05:00Z list --expired -o json
[ "$(jq length <<<"$OUT")" = 0 ] || fail "nothing expired yet: $OUT"

# The default skew (30s) keeps a just-expired sandbox alive.
expect_code 0 at 2026-12-02T12:10:20Z reap -o json
[ "$(jq '.items | length' <<<"$OUT")" = 0 ] || fail "reaped within the skew: $OUT"

# A dry run prints the plan and changes nothing; the plan runs later, exactly.
cp "$STATE/ledger.json" "$WORK/before.json"
expect_code 0 at 2026-12-02T12:11:00Z reap --dry-run -o json
echo "$OUT" >"$WORK/plan.json"
[ "$(jq -r '.items | map(.id + ":" + .action + ":" + .outcome) | join(",")' <<<"$OUT")" = \
  "$SHORT:destroy:planned" ] || fail "plan: $OUT"
cmp -s "$STATE/ledger.json" "$WORK/before.json" || fail "the dry run changed the ledger"
expect_code 0 at 2026-12-02T12:11:00Z reap --dry-run
expect_contains "$OUT" "planned"
# --max-destroy refuses and destroys nothing.
expect_code 7 at 2026-12-02T13:30:00Z reap --max-destroy 1
expect_contains "$ERR" "2 sandboxes would be destroyed, more than --max-destroy 1"
[ -d "$WORK/backend/sandboxes/$SHORT" ] || fail "--max-destroy destroyed something"
# At 13:30 both are expired, but the plan names only SHORT.
expect_code 0 at 2026-12-02T13:30:00Z reap --plan "$WORK/plan.json" -o json
[ "$(jq -r '.items | map(.id + ":" + .outcome) | join(",")' <<<"$OUT")" = "$SHORT:destroyed" ] ||
  fail "plan run: $OUT"
[ "$(state_of "$SHORT")" = destroyed ] || fail "planned one not destroyed"
[ "$(state_of "$LONG")" = running ] || fail "the plan destroyed more than it listed"
[ ! -e "$WORK/backend/sandboxes/$SHORT" ] || fail "backend left"
# Run again, the same plan skips what changed.
expect_code 0 at 2026-12-02T13:30:00Z reap --plan "$WORK/plan.json" -o json
expect_contains "$(jq -r '.items[0].reason' <<<"$OUT")" "changed since the plan"
expect_code 2 at 2026-12-02T13:30:00Z reap --plan "$WORK/before.json"
expect_contains "$ERR" "--plan"

# --quiet prints only what was done; a run that does something prints its row.
expect_code 0 at 2026-12-02T13:30:00Z reap --quiet --skew 0s
expect_contains "$OUT" "$LONG"
expect_contains "$OUT" "destroyed"
expect_code 0 at 2026-12-02T13:31:00Z reap --quiet
[ -z "$OUT" ] || fail "quiet reap with nothing to do printed: $OUT"

# A failing destroy stays expired with attempt and next attempt in its history, waits for its
# backoff, then is retried.
FLAKY=$(at $T0 create --profile flaky --ttl 5m --quiet)
expect_code 6 at 2026-12-02T12:06:00Z reap -o json
[ "$(state_of "$FLAKY")" = expired ] || fail "failed destroy: $(state_of "$FLAKY")"
LAST=$(ledger_jq --arg id "$FLAKY" '.sandboxes[] | select(.id == $id) | .history[-1]')
[ "$(jq -r .details.attempt <<<"$LAST")" = 1 ] || fail "attempt: $LAST"
[ "$(jq -r .details.next_attempt_at <<<"$LAST")" = 2026-12-02T12:07:00Z ] || fail "next: $LAST"
expect_contains "$(jq -r .reason <<<"$LAST")" "injected failure of destroy"
expect_code 0 at 2026-12-02T12:06:30Z reap -o json
[ "$(jq -r '.items[0].action' <<<"$OUT")" = wait ] || fail "no backoff: $OUT"
[ "$(cat "$WORK/backend/calls/destroy")" = 1 ] || fail "the backend was called during backoff"
expect_code 0 at 2026-12-02T12:07:00Z reap -o json
[ "$(state_of "$FLAKY")" = destroyed ] || fail "retry did not destroy"
[ "$(cat "$WORK/backend/calls/destroy")" = 2 ] || fail "destroy calls"

# A create killed in the middle of its backend call is repaired once it is old enough.
stub_profile slow <<EOF2
  root: $WORK/backend
  latency: { create: 30s }
EOF2
SANDBOXER_FAKE_NOW=$T0 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" \
  create --profile slow --name stuck >/dev/null 2>&1 &
PID=$!
for _ in $(seq 200); do
  [ "$(ledger_jq '[.sandboxes[] | select(.name == "stuck")] | length')" = 1 ] && break
  sleep 0.05
done
kill -9 "$PID"; wait "$PID" 2>/dev/null || true
[ "$(ledger_jq '.sandboxes[] | select(.name == "stuck") | .state')" = creating ] || fail "not stuck"
expect_code 0 at 2026-12-02T12:05:00Z reap --skew 0s -o json
[ "$(ledger_jq '.sandboxes[] | select(.name == "stuck") | .state')" = creating ] ||
  fail "repaired before --stuck-after"
expect_code 0 at 2026-12-02T12:11:00Z reap --skew 0s -o json
[ "$(jq -r '.items[] | select(.action == "repair") | .outcome' <<<"$OUT")" = failed ] ||
  fail "repair: $OUT"
[ "$(ledger_jq '.sandboxes[] | select(.name == "stuck") | .state')" = failed ] || fail "not settled"
expect_contains "$(ledger_jq '.sandboxes[] | select(.name == "stuck") | .history[-1].reason')" \
  "interrupted create"

# Orphans: a resource whose record is lost is reported, then destroyed only with =destroy. A
# resource of another ledger is never touched.
T1=2026-12-02T14:00:00Z
ORPHAN=$(at $T1 create --profile dev --quiet)
KEPT=$(at $T1 create --profile dev --quiet)
jq --arg id "$ORPHAN" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
mkdir -p "$WORK/backend/sandboxes/sbx-foreign00000/fs"
echo '{"labels": {"sandboxer.id": "sbx-foreign00000", "sandboxer.ledger": "ldg-another00000"}}' \
  >"$WORK/backend/sandboxes/sbx-foreign00000/meta.json"
expect_code 0 at $T1 reap --orphans -o json
[ "$(jq -r '.items | map(select(.action == "orphan")) | map(.id + ":" + .outcome) | join(",")' \
  <<<"$OUT")" = "$ORPHAN:reported" ] || fail "orphan report: $OUT"
[ -d "$WORK/backend/sandboxes/$ORPHAN" ] || fail "report destroyed the orphan"
expect_code 0 at $T1 reap --orphans=destroy -o json
[ "$(jq -r '.items | map(select(.action == "orphan")) | map(.outcome) | join(",")' <<<"$OUT")" = \
  destroyed ] || fail "orphan destroy: $OUT"
[ ! -e "$WORK/backend/sandboxes/$ORPHAN" ] || fail "orphan left"
[ -d "$WORK/backend/sandboxes/sbx-foreign00000" ] || fail "another ledger's resource was touched"
[ -d "$WORK/backend/sandboxes/$KEPT" ] || fail "a live sandbox was touched"
[ "$(state_of "$ORPHAN")" = destroyed ] || fail "orphan record"
# A live record whose resource is gone is closed as vanished.
rm -rf "$WORK/backend/sandboxes/$KEPT"
expect_code 0 at $T1 reap --orphans -o json
[ "$(state_of "$KEPT")" = destroyed ] || fail "vanished not marked"
[ "$(ledger_jq --arg id "$KEPT" '.sandboxes[] | select(.id == $id) | .history[-1].reason')" = \
  vanished ] || fail "vanished reason"

# One reaper at a time: a second one exits at once with --no-wait, or waits with --wait. The holder
# keeps the lock until told to let go, so no step below depends on how fast this machine is.
python3 - "$STATE/reap.lock" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.write(fd, b"pid %d sandboxer\n" % os.getpid())
open(sys.argv[1] + ".ready", "w").close()
for _ in range(1200):
    if os.path.exists(sys.argv[1] + ".release"):
        break
    time.sleep(0.1)
PY
HOLDER=$!
for _ in $(seq 200); do [ -e "$STATE/reap.lock.ready" ] && break; sleep 0.05; done
# A reaper that waited would wait its default minute; timeout stops it long before that (exit 124).
expect_code 5 env SANDBOXER_FAKE_NOW=$T1 timeout 30 "$SANDBOXER" --state-dir "$STATE" \
  --profiles-dir "$PROFILES" reap --no-wait
expect_contains "$ERR" "another reaper"
expect_code 5 at $T1 reap --wait 1s
expect_contains "$ERR" "locked by pid $HOLDER"
# Creates do not wait for the reaper.
expect_code 0 at $T1 create --profile dev --quiet
touch "$STATE/reap.lock.release"
expect_code 0 at $T1 reap --wait 2m
wait "$HOLDER"
rm -f "$STATE/reap.lock.ready" "$STATE/reap.lock.release"

# Metrics (Prometheus text), written atomically; totals carry over between runs.
M="$WORK/reap.prom"
FIN=$(at $T1 create --profile dev --ttl 1m --quiet)
expect_code 0 at 2026-12-02T14:05:00Z reap --metrics-file "$M"
grep -qx 'sandboxer_reap_destroyed 1' "$M" || fail "metrics: $(cat "$M")"
grep -qx 'sandboxer_sandboxes{state="destroyed"} [0-9]*' "$M" || fail "states: $(cat "$M")"
TOTAL=$(awk '$1 == "sandboxer_reap_destroyed_total" {print $2}' "$M")
expect_code 0 at 2026-12-02T14:05:00Z reap --metrics-file "$M"
[ "$(awk '$1 == "sandboxer_reap_destroyed_total" {print $2}' "$M")" = "$TOTAL" ] ||
  fail "total moved without a destroy"
grep -q '^sandboxer_reap_duration_seconds ' "$M" || fail "duration"
[ -z "$(find "$WORK" -maxdepth 1 -name '.reap.prom*')" ] || fail "temp metrics file left"

# Retention: closed records (destroyed, failed) go after --keep-history (default 7d).
N=$(ledger_jq '[.sandboxes[] | select(.state == "destroyed" or .state == "failed")] | length')
[ "$N" -ge 4 ] || fail "destroyed records: $N"
expect_code 0 at 2026-12-08T14:06:00Z reap -o json
[ "$(jq '.pruned' <<<"$OUT")" = 0 ] || fail "pruned before 7 days: $OUT"
M=$(ledger_jq '[.sandboxes[] | select(.state == "destroyed" or .state == "failed")] | length')
expect_code 0 at 2026-12-09T14:06:00Z reap -o json
[ "$(jq '.pruned' <<<"$OUT")" = "$N" ] || fail "prune: $OUT"
[ "$(ledger_jq '[.sandboxes[] | select(.state == "destroyed" or .state == "failed")] | length')" = $((M - N)) ] ||
  fail "destroyed records left"

# A second resource carrying a live record's id (a create repeated after its answer was lost,
# issue 34.7): reap --orphans reports it as a duplicate and destroys it, leaving the record and
# its own resource; destroy of the record removes every resource carrying its id.
T9=2026-12-09T14:10:00Z
DID=$(at $T9 create --profile dev --quiet)
cp -r "$WORK/backend/sandboxes/$DID" "$WORK/backend/sandboxes/dup-1"
expect_code 0 at $T9 reap --orphans -o json
[ "$(jq -r '.items[] | select(.action == "duplicate") | .outcome' <<<"$OUT")" = reported ] ||
  fail "the duplicate was not reported: $OUT"
expect_code 0 at $T9 reap --orphans=destroy -o json
[ "$(jq -r '.items[] | select(.action == "duplicate") | .backend_id' <<<"$OUT")" = dup-1 ] ||
  fail "the duplicate was not destroyed: $OUT"
[ ! -e "$WORK/backend/sandboxes/dup-1" ] || fail "dup-1 is still there"
[ -d "$WORK/backend/sandboxes/$DID" ] || fail "the record's own resource went too"
[ "$(state_of "$DID")" = running ] || fail "the record is $(state_of "$DID")"
cp -r "$WORK/backend/sandboxes/$DID" "$WORK/backend/sandboxes/dup-2"
expect_code 0 at $T9 destroy "$DID"
[ ! -e "$WORK/backend/sandboxes/dup-2" ] || fail "destroy left dup-2, which carries its id"
echo ok
