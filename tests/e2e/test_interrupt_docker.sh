#!/usr/bin/env bash
# Interrupted work (issue 14.1, 14.2) against the real Docker Engine: SIGINT/SIGTERM to sandboxer
# in the middle of a create's readiness wait and of an exec, a SIGKILL'd create that destroy finds
# by its label, and the exec contract for a program that does not exist (14.7).
source "$(dirname "$0")/lib.sh"
require_docker

cat >"$PROFILES/slow.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m }
docker:
  image: sandboxer/busybox:local
  command: [sleep, infinity]
  pull: never
  network: none
  stop_timeout: 0s
  readiness: { command: [test, -e, /tmp/never], timeout: 120s, interval: 200ms }
EOF2
sed -e '/readiness/d' "$PROFILES/slow.yaml" >"$PROFILES/quick.yaml"

LEDGER_ID=""
cleanup() {
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

containers_of() { docker ps -aq --filter "label=sandboxer.id=$1" | wc -l; }
# The engine runs the sandbox's container (the ledger's id is then known, for cleanup).
container_runs() {
  LEDGER_ID=$(ledger_jq .ledger_id)
  [ "$(docker ps -q --filter "label=sandboxer.id=$1" | wc -l)" = 1 ]
}

for signal in INT TERM; do
  start_slow_create "by-$signal" container_runs
  sleep 0.5 # inside the readiness loop
  interrupt_slow_create "$signal" "by-$signal"
  [ "$(containers_of "$ID")" = 0 ] || fail "SIG$signal: the container outlived the interrupted create"
done

# SIGKILL: nothing can clean up; destroy looks the container up by its label.
start_slow_create killed container_runs
kill -KILL "$PID"; wait "$PID" 2>/dev/null || true
[ "$(record "$ID" .backend_id)" = "" ] || fail "a backend id was recorded"
[ "$(record "$ID" .info.engine)" = unix:///var/run/docker.sock ] ||
  fail "the intent did not record its engine: $(record "$ID" .info)"
# status finds what the killed create made by its labels, instead of "nothing was recorded".
expect_code 0 sbx status killed -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status of a killed create: $OUT"
expect_contains "$(jq -r .backend.detail <<<"$OUT")" "found by its labels"
expect_code 0 sbx destroy killed
[ "$(record "$ID" .state)" = destroyed ] || fail "destroy left $(record "$ID" .state)"
[ "$(containers_of "$ID")" = 0 ] || fail "destroy said destroyed with the container still there"
expect_code 0 sbx destroy killed # by name, again: idempotent (14.6)

# Ctrl-C during exec reaches the command in the container; the history records its end.
ID=$(sbx create --profile quick --quiet)
expect_exec_forwards_sigint "$ID"
[ "$(docker top "$(record "$ID" .backend_id)" | grep -c 'while\|sh -c')" = 0 ] ||
  fail "the command still runs in the container"

# One contract for a missing program (14.7): 127 and one clear line, as with the stub.
expect_code 127 sbx exec "$ID" -- nosuchprog
[ -z "$OUT" ] || fail "the runtime's text reached stdout: $OUT"
expect_contains "$ERR" "nosuchprog: command not found in the sandbox"
expect_code 126 sbx exec "$ID" -- /etc/passwd
expect_contains "$ERR" "/etc/passwd: cannot be executed"
expect_code 0 sbx destroy "$ID"
echo "ok"
