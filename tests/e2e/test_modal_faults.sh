#!/usr/bin/env bash
# The modal driver's faults against tests/fake_modal: retries with one idempotency key, the
# server's retry-after, deadlines, a refused token, a quota, a slow snapshot, a create interrupted
# after Modal made the sandbox, and where the token may and may not appear (argv included).
. "$(dirname "$0")/lib.sh"
cd "$WORK"

# fake_with FLAGS...: a fresh fake with FLAGS and the profile "modal" pointing at it.
fake_with() {
  start_fake_modal "$@"
  CALLS="$FAKE_MODAL_DIR/calls.jsonl"
  modal_profile modal "call_timeout: 2s" "snapshot_timeout: 2s"
}
calls() { jq -c --arg rpc "$1" 'select(.rpc == $rpc)' "$CALLS"; }
LOG="$WORK/all-output"
run() {
  expect_code "$@"
  printf '%s\n%s\n' "$OUT" "$ERR" >>"$LOG"
}

# UNAVAILABLE twice: the third attempt goes through, all three with one idempotency key and
# counted attempts.
fake_with --fail SandboxCreate:2:UNAVAILABLE
run 0 sbx create --profile modal --name retried -o json
[ "$(calls SandboxCreate | jq -r .code | tr '\n' ' ')" = "14 14 0 " ] || fail "attempts: $(calls SandboxCreate)"
[ "$(calls SandboxCreate | jq -r '.metadata["x-idempotency-key"]' | sort -u | wc -l)" = 1 ] ||
  fail "the attempts did not share one idempotency key"
[ "$(calls SandboxCreate | jq -r '.metadata["x-retry-attempt"]' | tr '\n' ' ')" = "0 1 2 " ] ||
  fail "x-retry-attempt: $(calls SandboxCreate)"
run 0 sbx destroy retried

# A create whose answer is lost after Modal made the sandbox (a reset, issue 34.7): the retry looks
# for it by its sandboxer.id tag instead of making a second one. The fake allows one sandbox, so a
# second SandboxCreate would be refused; after the destroy the slot is free again.
fake_with --lose SandboxCreate --max-sandboxes 1
run 0 sbx create --profile modal --name lost -o json
[ "$(calls SandboxCreate | jq -r .code | tr '\n' ' ')" = "14 " ] ||
  fail "the lost SandboxCreate was repeated: $(calls SandboxCreate)"
[ "$(calls SandboxList | wc -l)" -ge 1 ] || fail "the retry did not look for the sandbox first"
run 0 sbx destroy lost
run 0 sbx create --profile modal --name after-lost -o json
run 0 sbx destroy after-lost

# Three UNAVAILABLE: out of attempts, a clear error naming the call, exit 4, nothing made.
fake_with --fail AppGetOrCreate:3:UNAVAILABLE
run 4 sbx create --profile modal
expect_contains "$ERR" "AppGetOrCreate"
[ "$(calls SandboxCreate | wc -l)" = 0 ] || fail "a failed app lookup went on"

# The server's retry-after (RPCRetryPolicy in the status details) is waited out.
fake_with --retry-after AppGetOrCreate:1.5
START=$(date +%s%N)
run 0 sbx create --profile modal --name throttled -o json
ELAPSED_MS=$(( ($(date +%s%N) - START) / 1000000 ))
[ "$ELAPSED_MS" -ge 1400 ] || fail "the retry-after was not honoured (${ELAPSED_MS} ms)"
[ "$(calls AppGetOrCreate | jq -r .code | tr '\n' ' ')" = "8 0 " ] || fail "throttle: $(calls AppGetOrCreate)"
run 0 sbx destroy throttled

# A call that hangs is cut at call_timeout and retried.
fake_with --hang SandboxGetTaskId:30
run 0 sbx create --profile modal --name hung -o json
[ "$(calls SandboxGetTaskId | head -1 | jq -r .code)" != 0 ] || true
run 0 sbx destroy hung

# A token Modal refuses: exit 4, said plainly, without the token.
fake_with
GOOD_SECRET=$MODAL_TOKEN_SECRET
MODAL_TOKEN_SECRET=as-wrongwrongwrong run 4 sbx create --profile modal
expect_contains "$ERR" "Modal refused the token"
expect_contains "$ERR" "check the profile's secrets token_id and token_secret"
case "$ERR" in *wrongwrong*) fail "the secret was printed" ;; esac
# A missing or malformed half: exit 2 before any call.
BEFORE=$(wc -l <"$CALLS")
MODAL_TOKEN_ID= run 2 sbx create --profile modal
MODAL_TOKEN_ID=not-a-token run 2 sbx create --profile modal
expect_contains "$ERR" "does not look like a Modal token id"
[ "$(wc -l <"$CALLS")" = "$BEFORE" ] || fail "a bad token still made calls"
MODAL_TOKEN_SECRET=$GOOD_SECRET

# A quota: exit 7 (the backend's own limit), nothing left in the ledger running.
fake_with --max-sandboxes 1
run 0 sbx create --profile modal --name first -o json
run 7 sbx create --profile modal --name second
expect_contains "$ERR" "refused by the workspace's limits"
[ "$(ledger_jq '.sandboxes[] | select(.name == "second") | .state')" = failed ] || fail "second not failed"
run 0 sbx destroy first

# A slow snapshot: cut at snapshot_timeout (exit 4, said), fine with a longer one.
fake_with --snapshot-delay 3
run 0 sbx create --profile modal --name snappy -o json
run 4 sbx snapshot snappy --name slow
expect_contains "$ERR" "TaskSnapshotFilesystem"
sed -i 's/snapshot_timeout: 2s/snapshot_timeout: 30s/' "$PROFILES/modal.yaml"
run 0 sbx create --profile modal --name snappy2 -o json
run 0 sbx snapshot snappy2 --name slow -o json
[[ "$(jq -r .backend_ref <<<"$OUT")" == im-* ]] || fail "slow snapshot: $OUT"
# Every attempt of a snapshot carries the same snapshot id (Modal's idempotency key).
[ "$(calls TaskSnapshotFilesystem | jq -r .request.snapshotId | sort -u | wc -l)" -ge 1 ] || fail "no snapshot id"
run 0 sbx destroy snappy
run 0 sbx destroy snappy2

# logs: a log stream that drops is asked again from its last entry id; each line comes once.
fake_with --fail SandboxGetLogs:3:UNAVAILABLE
modal_profile talk "call_timeout: 2s" 'command: [sh, -c, "echo once; echo twice >&2; sleep 600"]'
run 0 sbx create --profile talk --name talk -o json
for _ in $(seq 20); do
  run 0 sbx logs talk
  [ -n "$OUT" ] && [ -n "$ERR" ] && break
done
[ "$OUT" = once ] && [ "$ERR" = twice ] || fail "logs after dropped streams: $OUT / $ERR"
[ "$(calls SandboxGetLogs | jq -r 'select(.code == 14)' | wc -l)" -ge 1 ] || fail "no stream dropped"
run 0 sbx destroy talk

# A create interrupted after SandboxCreate (the task takes a while to appear): the sandbox is
# terminated before sandboxer exits, and the record is failed.
fake_with --task-polls 40
made() { [ "$(calls SandboxCreate | wc -l)" -ge 1 ]; }
cat "$PROFILES/modal.yaml" >"$PROFILES/slow.yaml"
start_slow_create cut made
# argv carries no token while a command talks to Modal.
for secret in "$MODAL_TOKEN_ID" "$MODAL_TOKEN_SECRET"; do
  tr '\0' ' ' <"/proc/$PID/cmdline" | grep -qF "$secret" && fail "a token half is in argv"
done
interrupt_slow_create INT cut
CUT_BID=$(calls SandboxCreate | tail -1 | jq -r .response.sandboxId)
calls SandboxTerminate | jq -r .request.sandboxId | grep -qx "$CUT_BID" ||
  fail "the interrupted create left sandbox $CUT_BID running"

# SIGKILL leaves no chance to clean up: the tags from the create call let reap's repair of the
# stuck record find the sandbox and terminate it.
# (A ledger of its own: the records above name fakes with other tokens, which reap would ask.)
STATE="$WORK/state-killed"
start_slow_create killed made
kill -KILL "$PID"
wait "$PID" 2>/dev/null || true
KILLED_BID=$(calls SandboxCreate | tail -1 | jq -r .response.sandboxId)
sleep 0.5
run 0 sbx reap --stuck-after 0s -o json
calls SandboxTerminate | jq -r .request.sandboxId | grep -qx "$KILLED_BID" ||
  fail "reap did not find the sandbox of a killed create: $OUT"

for secret in "$MODAL_TOKEN_ID" "$MODAL_TOKEN_SECRET" "$GOOD_SECRET"; do
  grep -rqF "$secret" "$STATE" && fail "a token half is in the state directory"
  grep -qF "$secret" "$LOG" && fail "a token half was printed"
done
echo ok
