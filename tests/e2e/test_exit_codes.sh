#!/usr/bin/env bash
# One case per documented exit code (docs/exit-codes.md), each with its message.
. "$(dirname "$0")/lib.sh"

stub_profile dev <<<'  root: '"$WORK/backend"
stub_profile broken <<EOF2
  root: $WORK/backend
  fail: { create: always }
EOF2

# 0: ok
expect_code 0 sbx version
expect_contains "$OUT" "drivers: "
expect_contains "$OUT" " stub"

# 2: usage, and an invalid profile with its file:line:col
expect_code 2 sbx create --no-such-flag
expect_contains "$ERR" "Try 'sandboxer create --help'"
expect_code 2 sbx frobnicate
printf 'driver: stub\nttl: { default: 30m }\nstub:\n  latncy: { create: 1s }\n' >"$PROFILES/typo.yaml"
expect_code 2 sbx create --profile typo
expect_contains "$ERR" "typo.yaml:4:3: driver.stub.latncy: unknown key \"latncy\", did you mean \"latency\"?"
expect_code 2 sbx create --profile dev --ttl 3x
expect_contains "$ERR" "--ttl: invalid duration \"3x\""
expect_code 2 sbx profiles validate "$PROFILES/typo.yaml" "$PROFILES/dev.yaml"
expect_code 2 sbx usage --by team
expect_contains "$ERR" '--by "team": expected profile, driver, owner or label:KEY'
expect_code 2 sbx list -o csv
expect_contains "$ERR" "-o csv: list does not print CSV"

# 3: not found (sandbox, profile)
expect_code 3 sbx destroy sbx-aaaaaaaaaaaa
expect_contains "$ERR" "no sandbox \"sbx-aaaaaaaaaaaa\""
expect_code 3 sbx create --profile nope
expect_contains "$ERR" "profile \"nope\" not found"

# 4: backend error, recorded as failed with the backend's message
expect_code 4 sbx create --profile broken -o json
expect_contains "$ERR" "injected failure of create"
[ "$(ledger_jq '.sandboxes[-1].state')" = failed ] || fail "failed create not recorded"
expect_contains "$(ledger_jq '.sandboxes[-1].error')" "injected failure"

# 5: lock timeout names the holder
ID=$(sbx create --profile dev --quiet)
python3 - "$STATE/ledger.lock" <<'PY' &
import fcntl, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
os.ftruncate(fd, 0); os.write(fd, b"pid %d holder-test\n" % os.getpid())
open(sys.argv[1] + ".ready", "w").close()
time.sleep(30)
PY
HOLDER=$!
for _ in $(seq 100); do [ -e "$STATE/ledger.lock.ready" ] && break; sleep 0.05; done
expect_code 5 sbx --lock-timeout 1 destroy "$ID"
expect_contains "$ERR" "locked by pid $HOLDER"
kill "$HOLDER"; wait "$HOLDER" 2>/dev/null || true

# 6: partial failure: one of two destroys fails
expect_code 6 sbx destroy "$ID" sbx-bbbbbbbbbbbb
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .state')" = destroyed ] ||
  fail "the good one was not destroyed"

# 7: refused by policy: extend beyond ttl.max
ID=$(sbx create --profile dev --ttl 2h --quiet)
expect_code 7 sbx extend "$ID" --by 1h
expect_contains "$ERR" "maximum"

# 9: the shared ledger's server is unreachable (nothing listens on loopback port 1): retried
# until --lock-timeout, then named
expect_code 9 sbx --ledger postgresql://sandboxer@127.0.0.1:1/ci --lock-timeout 1 list
expect_contains "$ERR" "ledger postgresql://sandboxer@127.0.0.1:1/ci: connecting failed"
expect_contains "$ERR" "gave up after 1s of retries (--lock-timeout)"

# 10: conflict: exec on a sandbox that is not running; a name that is taken (issue 35)
FAILED=$(sbx create --profile broken -o json 2>/dev/null | jq -r .id) || true
expect_code 10 sbx exec "$FAILED" -- true
expect_contains "$ERR" "is failed, not running: exec needs a running sandbox"
sbx create --profile dev --name taken --quiet >/dev/null
expect_code 10 sbx create --profile dev --name taken
expect_contains "$ERR" "the name \"taken\" is taken"

# 11: wait timeout (issue 35)
expect_code 11 sbx wait taken --for gone --timeout 1s
expect_contains "$ERR" "is not gone after 1s (--timeout)"

# 1: runtime error: a corrupt ledger is reported, never overwritten, and .bak is named
cp "$STATE/ledger.json" "$WORK/good.json"
printf '{"schema_version": 1, "sandboxes": [' >"$STATE/ledger.json"
cp "$STATE/ledger.json" "$WORK/corrupt.json"
expect_code 1 sbx create --profile dev
expect_contains "$ERR" "corrupt"
expect_contains "$ERR" "ledger.json.bak"
cmp -s "$STATE/ledger.json" "$WORK/corrupt.json" || fail "corrupt ledger was overwritten"
expect_code 1 sbx list
# The advice works: the .bak is a good ledger.
cp "$STATE/ledger.json.bak" "$STATE/ledger.json"
expect_code 0 sbx list -o json

# 130: interrupted by SIGINT
ID=$(sbx create --profile dev --quiet)
# A background job of a script starts with SIGINT ignored; give it back its default, as a shell's
# foreground command has.
python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec "$ID" -- sleep 30 &
PID=$!
# Wait until the command runs inside the sandbox: then sandboxer is waiting for it.
for _ in $(seq 200); do pgrep -P "$PID" -x sleep >/dev/null && break; sleep 0.05; done
kill -INT "$PID"
rc=0; wait "$PID" || rc=$?
[ "$rc" = 130 ] || fail "SIGINT gave $rc"
echo ok
