#!/usr/bin/env bash
# An external driver under concurrent calls (issue 34.1): a default `reap` of many expired
# sandboxes leases one driver process per parallel destroy, and an interrupted create's cleanup
# leases a second process while the create holds the first. Both used to wait for ever on the
# factory's own lock. The driver is the built-in stub served over the protocol.
. "$(dirname "$0")/lib.sh"
SANDBOXER=${SANDBOXER_TESTCLOCK:?set SANDBOXER_TESTCLOCK to the sandboxer-testclock binary (CTest does)}
: "${SANDBOXER_STUB_EXTERNAL:?set SANDBOXER_STUB_EXTERNAL (CTest does)}"
mkdir -p "$WORK/drivers"
ln -s "$SANDBOXER_STUB_EXTERNAL" "$WORK/drivers/sandboxer-driver-stub-external"
export SANDBOXER_DRIVER_PATH="$WORK/drivers"
T0=2026-12-02T12:00:00Z
T1=2026-12-02T13:00:00Z
at() { local t=$1; shift; SANDBOXER_FAKE_NOW=$t sbx "$@"; }

external_profile() {
  { printf 'driver: stub-external\nttl: { default: 30m, max: 2h }\nstub-external:\n'; cat; } \
    >"$PROFILES/$1.yaml"
}
external_profile ext <<EOF2
  root: $WORK/backend
EOF2
external_profile slow <<EOF2
  root: $WORK/backend
  latency: { ready: 60s }
EOF2

# 20 expired sandboxes, reaped with the default parallelism, within a deadline.
for i in $(seq 20); do
  at "$T0" create --profile ext --name "e$i" >/dev/null || fail "create e$i"
done
expect_code 0 env SANDBOXER_FAKE_NOW=$T1 timeout -k 5 120 \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" reap -o json
[ "$(jq '[.items[] | select(.outcome == "destroyed")] | length' <<<"$OUT")" = 20 ] ||
  fail "reap destroyed $(jq -c '[.items[] | .outcome]' <<<"$OUT")"
[ "$(ledger_jq '[.sandboxes[] | select(.state != "destroyed")] | length')" = 0 ] ||
  fail "records left: $(ledger_jq -c '[.sandboxes[] | {name, state}]')"
[ -z "$(ls -A "$WORK/backend/sandboxes")" ] || fail "backend left: $(ls "$WORK/backend/sandboxes")"

# Ctrl-C in a create's readiness wait: the cleanup lists and removes the resource through a second
# driver process, and the create exits 130.
stub_made() { [ -d "$WORK/backend/sandboxes/$1" ]; }
start_slow_create interrupted stub_made
# A hung create is killed after 60 s (and fails the check below); the watchdog ends with it, and
# holds none of the test's output open meanwhile.
(exec >/dev/null 2>&1 </dev/null; timeout 60 tail --pid="$PID" -f /dev/null || kill -KILL "$PID") &
interrupt_slow_create INT interrupted
expect_contains "$(record "$ID" .error)" "removed the 1 backend resource"
[ ! -e "$WORK/backend/sandboxes/$ID" ] || fail "the interrupted create left its resource"

# SIGKILL of sandboxer mid-create: its driver process dies with it (PR_SET_PDEATHSIG), rather than
# live on with nobody to talk to.
start_slow_create killed stub_made
DRIVER=$(pgrep -P "$PID" -f sandboxer-driver-stub-external | head -1)
[ -n "$DRIVER" ] || fail "no driver process under the create ($PID)"
kill -KILL "$PID"
wait "$PID" 2>/dev/null || true
for _ in $(seq 100); do alive "$DRIVER" || break; sleep 0.05; done
! alive "$DRIVER" || fail "the driver ($DRIVER) outlived the sandboxer that started it"
echo ok
