#!/usr/bin/env bash
# The docker driver's error messages of issue 3 point 6, as a user meets them: each one line that
# says what to do, and exit code 4. Needs the engine and image of test_docker.sh.
. "$(dirname "$0")/lib.sh"
require_docker

LEDGER_ID=""
FAKE_PID=""
OTHER_DIR=""
FOREIGN=""
cleanup() {
  [ -n "$FOREIGN" ] && docker rm -f "$FOREIGN" >/dev/null
  docker images -q --filter "label=sandboxer.id=${ID:-none}" | xargs -r docker rmi -f >/dev/null 2>&1
  [ -n "$FAKE_PID" ] && kill "$FAKE_PID" 2>/dev/null
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
  fi
  [ -n "$OTHER_DIR" ] && rm -rf "$OTHER_DIR"
  rm -rf "$WORK"
}
trap cleanup EXIT

# expect_one_line_error TEXT: the last command failed with exit 4 (checked by expect_code) and a
# single stderr line containing TEXT.
expect_one_line_error() {
  expect_contains "$ERR" "$1"
  [ "$(wc -l <<<"$ERR")" = 1 ] || fail "not one line: $ERR"
}

cat >"$PROFILES/box.yaml" <<'EOF2'
driver: docker
docker: { image: sandboxer/busybox:local, command: [sleep, infinity], pull: never, memory: 8m }
EOF2

# Permission denied on the socket: a user outside the docker group. As root, that user is nobody
# against the engine's real socket (root itself passes any file mode); otherwise a socket of our
# own with mode 000.
ENGINE_SOCKET=/var/run/docker.sock
case "${DOCKER_HOST:-}" in unix://*) ENGINE_SOCKET=${DOCKER_HOST#unix://} ;; esac
if [ "$(id -u)" = 0 ] && [ -S "$ENGINE_SOCKET" ] && command -v setpriv >/dev/null; then
  OTHER_DIR=$(mktemp -d "${TMPDIR:-/tmp}/sandboxer-e2e-nobody.XXXXXX")
  chmod 755 "$OTHER_DIR"
  cp "$PROFILES/box.yaml" "$OTHER_DIR/box.yaml"
  chown -R 65534:65534 "$OTHER_DIR"
  expect_code 4 setpriv --reuid=65534 --regid=65534 --clear-groups \
    env DOCKER_HOST="unix://$ENGINE_SOCKET" "$SANDBOXER" --state-dir "$OTHER_DIR/state" \
    --profiles-dir "$OTHER_DIR" create --profile box
else
  python3 -c 'import socket, sys; s = socket.socket(socket.AF_UNIX); s.bind(sys.argv[1])' \
    "$WORK/closed.sock"
  chmod 000 "$WORK/closed.sock"
  ENGINE_SOCKET=$WORK/closed.sock
  expect_code 4 env DOCKER_HOST="unix://$ENGINE_SOCKET" "$SANDBOXER" --state-dir "$STATE" \
    --profiles-dir "$PROFILES" create --profile box
fi
expect_one_line_error "permission denied on $ENGINE_SOCKET: add this user to the docker group"

# An engine older than API 1.41 answers every /v1.41 path with 400, as dockerd 19.03 does. A local
# fake engine on a unix socket stands in for it: only its answer matters here.
python3 "$SANDBOXER_SOURCE_DIR/tests/e2e/canned_http.py" 400 application/json \
  '{"message": "client version 1.41 is too new. Maximum supported API version is 1.40"}' \
  "$WORK/old.sock" &
FAKE_PID=$!
for _ in $(seq 100); do [ -e "$WORK/old.sock.ready" ] && break; sleep 0.05; done
[ -e "$WORK/old.sock.ready" ] || fail "the fake old engine did not start"
expect_code 4 env DOCKER_HOST="unix://$WORK/old.sock" "$SANDBOXER" --state-dir "$STATE" \
  --profiles-dir "$PROFILES" create --profile box
expect_one_line_error "speaks API 1.40, older than 1.41 which sandboxer needs"
expect_contains "$ERR" "upgrade docker"
[ "$(ledger_jq '.sandboxes[-1].state')" = failed ] || fail "too-old engine not recorded as failed"
kill "$FAKE_PID"
FAKE_PID=""

# A name conflict: the sandbox's container was removed by hand and someone made another container
# with its name; restoring the sandbox in place cannot take the name back.
expect_code 0 sbx create --profile box --name taken -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
expect_code 0 sbx snapshot taken --name s
docker rm -f "$CID" >/dev/null
FOREIGN=$(docker create --name "$ID" sandboxer/busybox:local sleep infinity)
expect_code 4 sbx restore taken:s --in-place taken
expect_one_line_error "a container named $ID already exists"
expect_contains "$ERR" "docker rm -f $ID"
docker rm -f "$FOREIGN" >/dev/null
FOREIGN=""
expect_code 0 sbx destroy taken
expect_code 0 sbx snapshots rm taken:s

# Out of memory: a command in a sandbox limited to 8m that grows without bound is killed by the
# kernel; exec says so (exit 4) instead of a bare 137.
expect_code 0 sbx create --profile box --name small -o json
LEDGER_ID=$(ledger_jq .ledger_id)
expect_code 4 sbx exec small -- sh -c 'x=a; while :; do x=$x$x; done'
expect_one_line_error "was killed for using more memory than the sandbox's limit"
expect_contains "$ERR" "raise docker.memory"
# A kill -9 that is not the OOM killer's is still the command's own 137.
expect_code 137 sbx exec small -- sh -c 'kill -9 $$'
expect_code 0 sbx destroy small

# A sandbox whose main process is killed for memory: status shows it stopped, and why.
cat >"$PROFILES/hog.yaml" <<'EOF2'
driver: docker
docker:
  image: sandboxer/busybox:local
  command: [sh, -c, "sleep 1; x=a; while :; do x=$x$x; done"]
  pull: never
  memory: 8m
EOF2
expect_code 0 sbx create --profile hog --name hog
for _ in $(seq 100); do
  expect_code 0 sbx status hog -o json
  [ "$(jq -r .backend.state <<<"$OUT")" = stopped ] && break
  sleep 0.1
done
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "the hog still runs: $OUT"
expect_contains "$(jq -r .backend.detail <<<"$OUT")" "killed for using more memory than its limit; raise docker.memory"
expect_code 0 sbx destroy hog

[ -z "$(docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID")" ] || fail "containers left behind"
echo ok
