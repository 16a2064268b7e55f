#!/usr/bin/env bash
# The modal driver against tests/fake_modal (a local gRPC server on Modal's protos): the whole
# lifecycle through the CLI, streamed exec, the entrypoint's logs, snapshot and restore, extend
# within Modal's fixed lifetime, a sandbox that ends by itself, reap, the older exec path, and TLS
# with a throwaway CA.
. "$(dirname "$0")/lib.sh"
cd "$WORK"

start_fake_modal
CALLS="$FAKE_MODAL_DIR/calls.jsonl"
# calls RPC: the fake's log lines of RPC, one JSON object each.
calls() { jq -c --arg rpc "$1" 'select(.rpc == $rpc)' "$CALLS"; }
ncalls() { calls "$1" | wc -l; }
# Everything the binary prints, kept to grep for the token at the end.
LOG="$WORK/all-output"
run() {
  expect_code "$@"
  printf '%s\n%s\n' "$OUT" "$ERR" >>"$LOG"
}

# sandbox_profile NAME [LINE...]: a modal_profile with a size, labels, env and tags, plus LINEs.
sandbox_profile() {
  local name=$1
  shift
  modal_profile "$name" "cpu: 0.5" "memory: 512m" "tags: { purpose: e2e }" "call_timeout: 5s" "$@"
  printf 'labels: { team: e2e }\nenv: { FROM_PROFILE: yes-profile }\n' >>"$PROFILES/$name.yaml"
}
sandbox_profile modal

# The example profile of the repository validates.
run 0 "$SANDBOXER" profiles validate "$SANDBOXER_SOURCE_DIR/profiles/modal-small.yaml"

# create: the image is built (a few polls, its log as progress), the sandbox carries the
# ownership tags, Modal's lifetime is modal.timeout, the network is blocked.
run 0 sbx -v create --profile modal --name one -o json
ID=$(jq -r .id <<<"$OUT")
BID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
[[ "$BID" == sb-* ]] || fail "backend id: $BID"
[ "$(ncalls ImageJoinStreaming)" -ge 2 ] || fail "the build was not followed: $(ncalls ImageJoinStreaming) joins"
[ "$(ncalls SandboxGetTaskId)" -ge 2 ] || fail "the task was not waited for"
CREATE=$(calls SandboxCreate | tail -1)
tag() { jq -r --arg t "$1" '.request.tags[] | select(.tagName == $t) | .tagValue' <<<"$CREATE"; }
[ "$(tag sandboxer.id)" = "$ID" ] || fail "tag sandboxer.id: $CREATE"
[ "$(tag sandboxer.ledger)" = "$LEDGER_ID" ] || fail "tag sandboxer.ledger"
[ "$(tag team)" = e2e ] || fail "profile labels as tags"
[ "$(tag purpose)" = e2e ] || fail "spec tags"
[ "$(jq -r .request.definition.timeoutSecs <<<"$CREATE")" = 7200 ] || fail "timeout_secs: $CREATE"
[ "$(jq -r .request.definition.networkAccess.networkAccessType <<<"$CREATE")" = BLOCKED ] ||
  fail "network not blocked by default"
[ "$(jq -r .request.definition.resources.milliCpu <<<"$CREATE")" = 500 ] || fail "cpu"
[ "$(jq -r .request.definition.resources.memoryMb <<<"$CREATE")" = 512 ] || fail "memory"
[ "$(jq -r '.metadata["x-modal-client-type"]' <<<"$CREATE")" = 9 ] || fail "client type"
[ "$(jq -r '.metadata["x-modal-client-version"]' <<<"$CREATE")" = 1.0.0 ] || fail "client version"

# list and status.
run 0 sbx list -o json
[ "$(jq -r --arg id "$ID" '[.[] | select(.id == $id)] | length' <<<"$OUT")" = 1 ] || fail "list: $OUT"
run 0 sbx status one -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status: $OUT"

# exec: stdout and stderr apart, the exit code, env from the profile and from the command line,
# a workdir, a missing program.
run 5 sbx exec -e FROM_CLI=yes-cli one -- sh -c 'echo "out $FROM_PROFILE $FROM_CLI"; echo err >&2; exit 5'
[ "$OUT" = "out yes-profile yes-cli" ] || fail "exec stdout: $OUT"
[ "$ERR" = err ] || fail "exec stderr: $ERR"
run 0 sbx exec -w /tmp one -- sh -c 'basename "$(pwd)"'
[ "$OUT" = tmp ] || fail "workdir: $OUT"
run 127 sbx exec one -- sandboxer-no-such-program
# stdin reaches the command, and its end closes the command's stdin.
OUT=$(printf 'line one\nline two\n' | sbx exec -i one -- cat) || fail "exec -i failed"
[ "$OUT" = $'line one\nline two' ] || fail "stdin: $OUT"
# -t from a terminal: the command gets one (pty_info) with the local size and TERM, and its
# exit code comes back.
TERM=xterm-256color /usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/tty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" exec -t one -- \
  sh -c 'test -t 0 && test -t 1 && echo "size=$(stty size)"; exit 6'
grep -qx "size=33 111" "$WORK/tty.out" || fail "exec -t: $(cat "$WORK/tty.out")"
grep -qx "exit=6" "$WORK/tty.out" || fail "exec -t exit code: $(cat "$WORK/tty.out")"
PTY=$(calls TaskExecStart | tail -1 | jq -c .request.ptyInfo)
[ "$(jq -r '[.enabled, .winszRows, .winszCols, .envTerm] | join(" ")' <<<"$PTY")" = \
  "true 33 111 xterm-256color" ] || fail "pty_info: $PTY"
# Output streams as it comes: the first line is there while the command still runs.
sbx exec one -- sh -c 'echo first; sleep 3; echo second' >"$WORK/stream" 2>&1 &
STREAM_PID=$!
for _ in $(seq 40); do grep -q first "$WORK/stream" && break; sleep 0.1; done
grep -q first "$WORK/stream" || fail "the first line did not come while the command ran"
grep -q second "$WORK/stream" && fail "the command ended too early"
wait "$STREAM_PID" ||
  fail "the streamed exec failed: $(cat "$WORK/stream"); failed calls: $(jq -c 'select(.code != 0)' "$CALLS" | tail -5)"
[ "$(cat "$WORK/stream")" = $'first\nsecond' ] || fail "streamed output: $(cat "$WORK/stream")"

# logs: the entrypoint's own output (SandboxGetLogs), stdout and stderr apart, resumed at each
# stream's entry id; --tail and --since; -f until the sandbox ends by itself, or a signal. The
# entrypoint ends when a file appears, so that the test, not a timer, says when.
sandbox_profile talk \
  'command: [sh, -c, "echo to-out; echo to-err >&2; while [ ! -e stop ]; do sleep 0.1; done; echo late"]'
run 0 sbx create --profile talk --name talk -o json
TALK_BID=$(jq -r .backend_id <<<"$OUT")
for _ in $(seq 20); do
  run 0 sbx logs talk
  [ -n "$OUT" ] && [ -n "$ERR" ] && break
done
[ "$OUT" = to-out ] || fail "logs stdout: $OUT"
[ "$ERR" = to-err ] || fail "logs stderr: $ERR"
GETS=$(calls SandboxGetLogs | jq -c 'select(.request.sandboxId == "'"$TALK_BID"'") | .request')
[ "$(jq -r .fileDescriptor <<<"$GETS" | sort -u | tr '\n' ' ')" = "FILE_DESCRIPTOR_STDERR FILE_DESCRIPTOR_STDOUT " ] ||
  fail "not one stream per descriptor: $GETS"
[ "$(jq -r .lastEntryId <<<"$GETS" | sort -u)" = 0-0 ] || fail "not read from the start: $GETS"
jq -e 'select(.timeout <= 0)' <<<"$GETS" >/dev/null && fail "a log stream without its timeout: $GETS"
run 0 sbx logs talk -o json
[ "$(jq -r 'select(.line == "to-err") | .stream' <<<"$OUT")" = stderr ] || fail "logs -o json: $OUT"
[ "$(jq -r 'select(.line == "to-out") | .stream' <<<"$OUT")" = stdout ] || fail "logs -o json: $OUT"
jq -e 'select(.time == null)' <<<"$OUT" >/dev/null && fail "a line without its time: $OUT"
run 0 sbx logs talk --tail 1 -o json
[ "$(wc -l <<<"$OUT")" = 1 ] || fail "--tail 1: $OUT"
run 0 sbx logs talk --since 2099-01-01T00:00:00Z
[ -z "$OUT$ERR" ] || fail "--since in the future: $OUT / $ERR"
run 0 sbx logs talk --since 1h
[ "$OUT" = to-out ] && [ "$ERR" = to-err ] || fail "--since 1h: $OUT / $ERR"
# -f: what there is, then each new line, until the entrypoint ends.
# It must return by itself once the sandbox ends; `timeout` bounds it at 60 s (exit 124). No
# watchdog subshell: one killed by the test may run the test's EXIT trap (the trap that stops the
# fake and removes $WORK) as it dies; a CI run once lost $WORK that way.
timeout 60 "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f talk \
  >"$WORK/follow.out" 2>"$WORK/follow.err" &
FOLLOW_PID=$!
for _ in $(seq 100); do grep -q to-out "$WORK/follow.out" && break; sleep 0.1; done
grep -q to-out "$WORK/follow.out" || fail "logs -f did not show what there was: $(cat "$WORK/follow.out")"
sleep 1
alive "$FOLLOW_PID" || fail "logs -f ended while the sandbox runs: $(cat "$WORK/follow.out" "$WORK/follow.err")"
run 0 sbx exec talk -- touch stop
FOLLOW_STATUS=0
wait "$FOLLOW_PID" || FOLLOW_STATUS=$?
[ "$FOLLOW_STATUS" -ne 124 ] || fail "logs -f did not return within 60 s of the sandbox's end:" \
  "stdout [$(cat "$WORK/follow.out")], stderr [$(cat "$WORK/follow.err")]; its log calls:" \
  "$(calls SandboxGetLogs | jq -c 'select(.request.sandboxId == "'"$TALK_BID"'") | [.request.fileDescriptor, .request.lastEntryId, .code]' | tail -4 | tr '\n' ' ')"
[ "$FOLLOW_STATUS" -eq 0 ] || fail "logs -f failed ($FOLLOW_STATUS): $(cat "$WORK/follow.err")"
[ "$(cat "$WORK/follow.out")" = $'to-out\nlate' ] || fail "logs -f stdout: $(cat "$WORK/follow.out")"
[ "$(cat "$WORK/follow.err")" = to-err ] || fail "logs -f stderr: $(cat "$WORK/follow.err")"
# The follow went on from each stream's last entry, not from the start.
calls SandboxGetLogs | jq -r 'select(.request.sandboxId == "'"$TALK_BID"'") | .request.lastEntryId' |
  grep -qvx 0-0 || fail "the streams were not resumed at their entry id"
run 0 sbx status talk -o json
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "the ended entrypoint did not end the sandbox: $OUT"
# A finished sandbox: everything, at once (its streams end with eof, no window waited out), and
# its last line is the newest.
run 0 sbx logs talk
[ "$OUT" = $'to-out\nlate' ] && [ "$ERR" = to-err ] || fail "logs after the end: $OUT / $ERR"
calls SandboxGetLogs | tail -2 | jq -e 'select(.ms >= 1500)' >/dev/null &&
  fail "logs of a finished sandbox waited: $(calls SandboxGetLogs | tail -2)"
run 0 sbx logs talk --tail 1
[ "$OUT" = late ] && [ -z "$ERR" ] || fail "--tail 1 after the end: $OUT / $ERR"
run 0 sbx logs -f talk --tail 1
[ "$OUT" = late ] && [ -z "$ERR" ] || fail "-f --tail 1 after the end: $OUT / $ERR"
run 0 sbx destroy talk
# -f on a sandbox that keeps running ends at a signal, at once (exit 130).
"$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" logs -f one \
  >"$WORK/follow.out" 2>"$WORK/follow.err" &
FOLLOW_PID=$!
sleep 3
alive "$FOLLOW_PID" || fail "logs -f of a running sandbox ended: $(cat "$WORK/follow.err")"
kill -INT "$FOLLOW_PID"
# At once is well inside the 55 s window a follow holds open, which is what a signal that was not
# heard would cost. 0.2 s on an idle machine; a sanitizer build beside a fuzz build in CI once took
# over 10 s (an exit's leak check over gRPC's heap), so the bound is 30 s.
for _ in $(seq 300); do alive "$FOLLOW_PID" || break; sleep 0.1; done
alive "$FOLLOW_PID" && fail "logs -f did not stop within 30 s of SIGINT: $(tail -3 "$WORK/follow.err")"
RC=0
wait "$FOLLOW_PID" || RC=$?
[ "$RC" = 130 ] || fail "logs -f at SIGINT: exit $RC: $(cat "$WORK/follow.err")"

# ports: (docs/ports.md): each an open port of the definition, reached through Modal's tunnel
# (SandboxGetTunnels), a TLS host of its own; a host_port is refused before anything is made.
sandbox_profile web
printf 'ports: [8080, 3000]\n' >>"$PROFILES/web.yaml"
run 0 sbx create --profile web --name web -o json
WEB_BID=$(jq -r .backend_id <<<"$OUT")
[ "$(calls SandboxCreate | tail -1 | jq -c '[.request.definition.openPorts.ports[].port]')" = "[8080,3000]" ] ||
  fail "open ports: $(calls SandboxCreate | tail -1)"
[ "$(jq -c '[.ports[] | [.port, .protocol, .host_port, (.url | startswith("https://")), (.host | length > 0)]]' <<<"$OUT")" = \
  '[[8080,"tcp",443,true,true],[3000,"tcp",443,true,true]]' ] || fail "modal ports: $OUT"
TUNNEL_HOST=$(calls SandboxGetTunnels | tail -1 | jq -r '.response.tunnels[] | select(.containerPort == 8080) | .host')
run 0 sbx port web 8080
[ "$OUT" = "$TUNNEL_HOST:443" ] || fail "port web 8080: $OUT (the tunnel: $TUNNEL_HOST)"
run 0 sbx forward web 8080
expect_contains "$OUT" "8080/tcp -> https://$TUNNEL_HOST"
[ "$(jq -r --arg b "$WEB_BID" .request.sandboxId <<<"$(calls SandboxGetTunnels | tail -1)")" = "$WEB_BID" ] ||
  fail "the tunnels asked for: $(calls SandboxGetTunnels | tail -1)"
run 0 sbx destroy web
CREATES=$(ncalls SandboxCreate)
sandbox_profile web-udp
printf 'ports: ["53/udp"]\n' >>"$PROFILES/web-udp.yaml"
run 2 sbx create --profile web-udp
expect_contains "$ERR" "udp, host_port and bind have no meaning there"
[ "$(ncalls SandboxCreate)" = "$CREATES" ] || fail "a refused ports: created a Modal sandbox"

# snapshot, then restore into a new sandbox that has the files of the moment of the snapshot.
run 0 sbx exec one -- sh -c 'echo before > mark'
run 0 sbx snapshot one --name s1 -o json
SNAP_REF=$(jq -r .backend_ref <<<"$OUT")
[[ "$SNAP_REF" == im-* ]] || fail "snapshot ref: $SNAP_REF"
[ "$(calls TaskSnapshotFilesystem | tail -1 | jq -r .request.ttlSeconds)" = 2592000 ] ||
  fail "snapshot ttl: $(calls TaskSnapshotFilesystem | tail -1)"
run 0 sbx exec one -- sh -c 'echo after > mark'
run 0 sbx restore "one:s1" --name two -o json
ID2=$(jq -r .id <<<"$OUT")
BID2=$(jq -r .backend_id <<<"$OUT")
[ "$BID2" != "$BID" ] || fail "restore reused the sandbox"
[ "$(calls SandboxCreate | tail -1 | jq -r .request.definition.imageId)" = "$SNAP_REF" ] ||
  fail "restore did not start from the snapshot's image"
run 0 sbx exec two -- cat mark
[ "$OUT" = before ] || fail "restored content: $OUT"

# extend: the ledger's deadline moves within Modal's lifetime (2h from create), not past it.
run 0 sbx extend one --by 1h -o json
END=$(record "$ID" .expires_at)
run 7 sbx extend one --by 2h
expect_contains "$ERR" "Modal cannot extend sandbox $ID beyond the lifetime it was created with (2h"
expect_contains "$ERR" "Snapshot it and restore from the snapshot"
[ "$(record "$ID" .expires_at)" = "$END" ] || fail "a refused extend moved the ledger's deadline"
# A TTL longer than modal.timeout is refused before anything is made.
BEFORE=$(ncalls SandboxCreate)
run 7 sbx create --profile modal --ttl 3h
# The TTL left when the driver looks: a slow start (a sanitizer build) may have spent a second of it.
grep -qE "a TTL of (3h|2h59m[0-9]+s) is longer than modal.timeout 2h" <<<"$ERR" ||
  fail "the refusal does not name the TTL and modal.timeout: $ERR"
[ "$(ncalls SandboxCreate)" = "$BEFORE" ] || fail "a refused TTL still created a sandbox"

# destroy: terminated at Modal; again is fine; the ledger says destroyed.
run 0 sbx destroy one
[ "$(calls SandboxTerminate | tail -1 | jq -r .request.sandboxId)" = "$BID" ] || fail "no terminate"
run 0 sbx destroy two
[ "$(record "$ID2" .state)" = destroyed ] || fail "two not destroyed"
run 0 sbx snapshots rm "one:s1"

# On a terminal, a new image's build log is the progress on stderr; off one, nothing of it.
sandbox_profile built
sed -i 's/^  image: debian:12$/  image: alpine:3/' "$PROFILES/built.yaml"
/usr/bin/python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/run_on_pty.py" "$WORK/pty.out" \
  "$SANDBOXER" --state-dir "$STATE" --profiles-dir "$PROFILES" create --profile built --name built
expect_contains "$(cat "$WORK/pty.out")" "exit=0"
BUILT_IMAGE=$(calls ImageGetOrCreate | tail -1 | jq -r .response.imageId)
expect_contains "$(cat "$WORK/pty.out")" "Building image $BUILT_IMAGE: step 1.1"
run 0 sbx destroy built
sandbox_profile built2
sed -i 's/^  image: debian:12$/  image: alpine:3.20/' "$PROFILES/built2.yaml"
run 0 sbx create --profile built2 --name built2
[[ "$ERR" != *"Building image"* ]] || fail "build log printed off a terminal: $ERR"
run 0 sbx destroy built2

# A sandbox that ends by itself (Modal's idle timeout): status says so, destroy closes it.
sandbox_profile idle "idle_timeout: 2s"
run 0 sbx create --profile idle --name idle -o json
IDLE_BID=$(jq -r .backend_id <<<"$OUT")
[ "$(calls SandboxCreate | tail -1 | jq -r .request.definition.idleTimeoutSecs)" = 2 ] || fail "idle timeout not sent"
sleep 3
run 0 sbx status idle -o json
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "idle sandbox: $OUT"
expect_contains "$(jq -r .backend.detail <<<"$OUT")" "idle timeout"
run 0 sbx destroy idle

# Without modal.timeout, Modal's lifetime is the TTL: nothing outlives its deadline.
sandbox_profile ttl
sed -i '/^  timeout: 2h$/d' "$PROFILES/ttl.yaml"
run 0 sbx create --profile ttl --name short --ttl 10m -o json
SHORT_BID=$(jq -r .backend_id <<<"$OUT")
T=$(calls SandboxCreate | tail -1 | jq -r .request.definition.timeoutSecs)
[ "$T" -ge 599 ] && [ "$T" -le 600 ] || fail "timeout_secs without modal.timeout: $T"
# reap: past its deadline, it is terminated at Modal.
LATER=$(date -u -d '+20 minutes' +%Y-%m-%dT%H:%M:%SZ)
SANDBOXER=$SANDBOXER_TESTCLOCK SANDBOXER_FAKE_NOW="$LATER" run 0 sbx reap -o json
[ "$(ledger_jq '.sandboxes[] | select(.name == "short") | .state')" = destroyed ] || fail "not reaped"
calls SandboxTerminate | jq -r .request.sandboxId | grep -qx "$SHORT_BID" || fail "reap did not terminate"

# reap --orphans: a sandbox whose record is lost is found by its tags and killed with =destroy.
run 0 sbx create --profile modal --name lost -o json
LOST_ID=$(jq -r .id <<<"$OUT")
LOST_BID=$(jq -r .backend_id <<<"$OUT")
jq --arg id "$LOST_ID" '.sandboxes |= map(select(.id != $id))' "$STATE/ledger.json" >"$WORK/l.json"
cp "$WORK/l.json" "$STATE/ledger.json"
run 0 sbx reap --orphans -o json
[ "$(jq -r '[.items[] | select(.action == "orphan") | .id + ":" + .outcome] | join(",")' \
  <<<"$OUT")" = "$LOST_ID:reported" ] || fail "orphan report: $OUT"
run 0 sbx reap --orphans=destroy -o json
[ "$(jq -r '[.items[] | select(.action == "orphan") | .outcome] | join(",")' <<<"$OUT")" = \
  destroyed ] || fail "orphan destroy: $OUT"
calls SandboxTerminate | jq -r .request.sandboxId | grep -qx "$LOST_BID" || fail "orphan not terminated"

# The token: never in the state directory or anything printed (even with debug logs).
run 0 sbx create --profile modal --name last -o json
run 0 sbx --log-level trace exec last -- echo debug
run 0 sbx --log-level trace destroy last
for secret in "$MODAL_TOKEN_ID" "$MODAL_TOKEN_SECRET"; do
  grep -rqF "$secret" "$STATE" && fail "a token half is in the state directory"
  grep -qF "$secret" "$LOG" && fail "a token half was printed"
done
echo "lifecycle ok"

# The older exec path (a server without the command router): exec and snapshot still work.
OLD_URL=$MODAL_FAKE_URL
start_fake_modal --no-router
sandbox_profile legacy
run 0 sbx create --profile legacy --name legacy -o json
run 3 sbx exec legacy -- sh -c 'echo out; echo err >&2; exit 3'
[ "$OUT" = out ] && [ "$ERR" = err ] || fail "legacy exec: $OUT / $ERR"
run 0 sbx exec legacy -- sh -c 'echo kept > mark'
run 0 sbx snapshot legacy --name s -o json
[ "$(jq -r '.rpc' "$FAKE_MODAL_DIR/calls.jsonl" | grep -c '^SandboxSnapshotFs$')" = 1 ] || fail "no legacy snapshot"
run 0 sbx restore legacy:s --name legacy2 -o json
run 0 sbx exec legacy2 -- cat mark
[ "$OUT" = kept ] || fail "legacy restore: $OUT"
run 0 sbx destroy legacy
run 0 sbx destroy legacy2
echo "legacy ok"

# TLS with a throwaway CA: trusted through grpc's root file, refused without it.
start_fake_modal --tls
sandbox_profile tls
run 0 sbx create --profile tls --name tls -o json
run 0 sbx exec tls -- echo over-tls
[ "$OUT" = over-tls ] || fail "exec over TLS: $OUT"
run 0 sbx destroy tls
GRPC_DEFAULT_SSL_ROOTS_FILE_PATH=/etc/ssl/certs/ca-certificates.crt run 4 sbx create --profile tls
expect_contains "$ERR" "cannot reach Modal at $MODAL_FAKE_URL"
echo "tls ok"
