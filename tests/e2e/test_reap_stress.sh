#!/usr/bin/env bash
# Stress: 200 stub sandboxes with random TTLs, three reapers and more creates running at once.
# At the end every expired sandbox was destroyed exactly once (by its history and by the stub's
# destroy call counter) and the ledger parses.
# Moves the clock with SANDBOXER_FAKE_NOW, which only the test build honours.
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
. "$(dirname "$0")/lib.sh"

# A failure threshold no run reaches: it only makes the stub count its destroy calls.
stub_profile s <<EOF2
  root: $WORK/backend
  fail: { destroy: 1000000000 }
EOF2

T0=2026-12-02T12:00:00Z
epoch() { date -u -d "$1" +%s; }
iso() { date -u -d "@$1" +%Y-%m-%dT%H:%M:%SZ; }
BASE=$(epoch $T0)

# Creates, four at a time, TTLs between 1 and 10 minutes.
make_some() {
  for _ in $(seq "$1"); do
    SANDBOXER_FAKE_NOW=$T0 sbx create --profile s --ttl $((RANDOM % 540 + 60))s --quiet \
      >>"$WORK/created.$2" 2>>"$WORK/errors" || echo "create failed" >>"$WORK/errors"
  done
}
START=$(date +%s)
for w in 1 2 3 4; do make_some 40 "$w" & done
wait

# Three reapers walk their clocks from T0 through 12 minutes while creates go on.
reaper() {
  for step in $(seq 1 12); do
    SANDBOXER_FAKE_NOW=$(iso $((BASE + step * 60))) sbx reap --skew 0s --parallel 4 --wait 30s \
      --quiet >>"$WORK/reaped.$1" 2>>"$WORK/reap-errors.$1"
    rc=$?
    [ "$rc" = 0 ] || echo "reaper $1 step $step exit $rc" >>"$WORK/errors"
  done
}
for r in 1 2 3; do reaper "$r" & done
make_some 20 5 &
make_some 20 6 &
wait
# A last reap after every deadline.
SANDBOXER_FAKE_NOW=$(iso $((BASE + 3600))) sbx reap --skew 0s --quiet >/dev/null 2>>"$WORK/errors" ||
  fail "final reap: $(cat "$WORK/errors")"

[ ! -s "$WORK/errors" ] || fail "errors: $(head -20 "$WORK/errors")"
jq -e . "$STATE/ledger.json" >/dev/null || fail "the ledger does not parse"
TOTAL=$(ledger_jq '.sandboxes | length')
[ "$TOTAL" = 200 ] || fail "expected 200 records, got $TOTAL"
[ "$(cat "$WORK"/created.* | sort -u | wc -l)" = 200 ] || fail "created ids"
# Every sandbox expired by the last reap, and each was destroyed exactly once.
[ "$(ledger_jq '[.sandboxes[] | select(.state != "destroyed")] | length')" = 0 ] ||
  fail "not destroyed: $(ledger_jq '[.sandboxes[] | select(.state != "destroyed") | .id]')"
[ "$(ledger_jq '[.sandboxes[] | select(([.history[] | select(.to == "destroyed")] | length) != 1)] | length')" = 0 ] ||
  fail "a sandbox was destroyed twice in its history"
[ "$(ledger_jq '[.sandboxes[] | select(([.history[] | select(.to == "expired")] | length) != 1)] | length')" = 0 ] ||
  fail "a sandbox was claimed twice"
[ "$(cat "$WORK/backend/calls/destroy")" = 200 ] ||
  fail "the backend saw $(cat "$WORK/backend/calls/destroy") destroy calls for 200 sandboxes"
# No reaper destroyed anything before its deadline.
[ "$(ledger_jq '[.sandboxes[] | select((.history[] | select(.to == "expired") | .time) < .expires_at)] | length')" = 0 ] ||
  fail "reaped before the deadline"
ls "$WORK/backend/sandboxes" | grep -q . && fail "backend directories left"
echo "ok: 200 sandboxes, 3 reapers, $(($(date +%s) - START))s"
