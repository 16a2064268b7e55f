#!/usr/bin/env bash
# compose-ssh failures, each a clear error naming the host (and the service), exit 4, within the
# timeouts, with nothing left running on the host: host down, a host that never speaks ssh, a wrong
# key, an unknown host key, compose missing on the host, a service that exits at once, a failed
# pull. And profile mistakes, caught before any connection with file:line.
. "$(dirname "$0")/lib.sh"
require_docker
start_sshd
cd "$WORK"
cat >"$PROFILES/stack.yml" <<'EOF2'
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
EOF2

# fails_fast PROFILE SECONDS NEEDLE...: create exits 4 within SECONDS, its error has every NEEDLE,
# and the record is failed. The limits only tell "failed at once" from "waited out a timeout"
# (command_timeout 60s, ready_timeout 2m, up_timeout 10m): they are generous because a loaded CI
# machine running the ASan build once took 21 s for ssh to report a refused key.
fails_fast() {
  local profile=$1 limit=$2; shift 2
  local start=$SECONDS
  expect_code 4 sbx create --profile "$profile" -o json
  [ $((SECONDS - start)) -le "$limit" ] || fail "$profile: took $((SECONDS - start))s (limit ${limit}s)"
  local needle
  for needle in "$@"; do expect_contains "$ERR" "$needle"; done
  echo "$profile ($((SECONDS - start))s): $ERR"
  case "$ERR" in *"$SSH_DIR/client_key"-----*) fail "a key's content in the error" ;; esac
}

# Host down: nothing listens on the port.
DOWN=$(free_port)
compose_profile down stack.yml
sed -i "s/port: $SSH_PORT/port: $DOWN/" "$PROFILES/down.yaml"
fails_fast down 45 "cannot reach" "127.0.0.1:$DOWN" "Connection refused"

# A host that accepts the connection and never speaks: connect_timeout ends it.
/usr/bin/python3 -c '
import socket, sys, time
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(8)
print(s.getsockname()[1], flush=True)
conns = []
end = time.time() + 60
while time.time() < end:
    s.settimeout(1)
    try: conns.append(s.accept()[0])
    except OSError: pass
' >"$WORK/silent.port" &
SILENT_PID=$!
at_exit "kill $SILENT_PID 2>/dev/null || true"
for _ in $(seq 50); do [ -s "$WORK/silent.port" ] && break; sleep 0.1; done
compose_profile silent stack.yml "  connect_timeout: 2s"
sed -i "s/port: $SSH_PORT/port: $(cat "$WORK/silent.port")/" "$PROFILES/silent.yaml"
fails_fast silent 45 "cannot reach" "127.0.0.1:$(cat "$WORK/silent.port")"

# A key the host does not know.
ssh-keygen -q -t ed25519 -N '' -f "$WORK/stranger_key"
compose_profile wrongkey stack.yml
sed -i "s|identity_file: .*|identity_file: $WORK/stranger_key|" "$PROFILES/wrongkey.yaml"
fails_fast wrongkey 45 "refused the key $WORK/stranger_key" "127.0.0.1:$SSH_PORT"

# An unknown host key: known_hosts without the host. Never StrictHostKeyChecking=no.
: >"$WORK/empty_known_hosts"
compose_profile unknownhost stack.yml
sed -i "s|known_hosts: .*|known_hosts: $WORK/empty_known_hosts|" "$PROFILES/unknownhost.yaml"
fails_fast unknownhost 45 "host key of sandboxer-e2e@127.0.0.1:$SSH_PORT" "$WORK/empty_known_hosts"
[ ! -s "$WORK/empty_known_hosts" ] || fail "the unknown host key was written to known_hosts"

# Compose missing on the host: a second sshd whose sessions' PATH has docker and the basics only.
mkdir -p "$WORK/bin"
chmod 755 "$WORK/bin"
for tool in docker tar cat rm sh; do ln -s "$(command -v "$tool")" "$WORK/bin/$tool"; done
FIRST_PORT=$SSH_PORT
FIRST_DIR=$SSH_DIR
start_sshd "SetEnv PATH=$WORK/bin"
compose_profile nocompose stack.yml
fails_fast nocompose 45 "neither 'docker compose' nor 'docker-compose' is installed on" "127.0.0.1:$SSH_PORT"
SSH_PORT=$FIRST_PORT
SSH_DIR=$FIRST_DIR

# A service that exits at once: named, with its last log line; nothing left running.
cat >"$PROFILES/quits.yml" <<'EOF2'
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
  migrate: { image: sandboxer/busybox:local, command: ["sh", "-c", "echo schema broken; exit 3"] }
EOF2
# `settle: 1s`: create waits until every service has stayed up a second, so the exit is seen
# whenever it comes in that second (by default create returns at the first look after up).
compose_profile quits quits.yml "  settle: 1s"
fails_fast quits 90 "service migrate" "exited with code 3" "127.0.0.1:$SSH_PORT" "schema broken"
ID=$(ledger_jq '.sandboxes[-1].id')
[ "$(record "$ID" .state)" = failed ] || fail "the record is not failed"
[ -z "$(compose_leftovers "$ID")" ] || fail "a failed create left: $(compose_leftovers "$ID")"

# A failed pull (a registry on a loopback port nobody serves): named, nothing left.
cat >"$PROFILES/pull.yml" <<EOF2
services:
  web: { image: sandboxer/busybox:local, command: ["sleep", "3600"], init: true }
  api: { image: "127.0.0.1:$DOWN/nothing:latest" }
EOF2
compose_profile pull pull.yml
fails_fast pull 90 "for service api" "127.0.0.1:$SSH_PORT"
# The error quotes compose's words, not the lines of sandboxer's own remote script.
case "$ERR" in *stage=* | *compose=*) fail "the error quotes the remote script: $ERR" ;; esac
ID=$(ledger_jq '.sandboxes[-1].id')
[ -z "$(compose_leftovers "$ID")" ] || fail "a failed pull left: $(compose_leftovers "$ID")"

# Profile mistakes: file:line, exit 2, before any connection.
compose_profile typo stack.yml "  servce: web"
expect_code 2 sbx create --profile typo
expect_contains "$ERR" "typo.yaml:"
expect_contains "$ERR" 'did you mean "service"'
compose_profile nofile missing.yml
expect_code 2 sbx create --profile nofile
expect_contains "$ERR" "nofile.yaml:9:"
expect_contains "$ERR" "no such file: $PROFILES/missing.yml"
compose_profile noservice stack.yml "  service: nope"
expect_code 2 sbx create --profile noservice
expect_contains "$ERR" 'service "nope" is not in'
echo ok
