#!/usr/bin/env bash
# The docker driver against a real Docker Engine (started by scripts/start-docker.sh) and the local
# image sandboxer/busybox:local. Checked as a user would, with the docker CLI on the side.
. "$(dirname "$0")/lib.sh"
require_docker

cat >"$PROFILES/box.yaml" <<'EOF2'
driver: docker
ttl: { default: 30m, max: 2h }
labels: { team: e2e }
env: { FROM_PROFILE: yes-profile }
docker:
  image: sandboxer/busybox:local
  command: [sleep, infinity]
  pull: never
  cpus: 0.5
  memory: 64m
  pids_limit: 50
  network: none
  env: { FROM_SPEC: yes-spec }
  mounts:
    - { type: tmpfs, target: /scratch, size: 8m }
  cap_drop: [NET_RAW]
EOF2

LEDGER_ID=""
cleanup() {
  # Whatever happens, no container of this test's ledger survives it.
  if [ -n "$LEDGER_ID" ]; then
    docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rm -f >/dev/null
    # Only this ledger's snapshots (a commit keeps the container's labels): the other docker
    # tests running beside this one keep theirs.
    docker images -q --filter "label=sandboxer.ledger=$LEDGER_ID" | xargs -r docker rmi -f >/dev/null 2>&1 || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

expect_code 0 sbx create --profile box --name box1 -o json
ID=$(jq -r .id <<<"$OUT")
CID=$(jq -r .backend_id <<<"$OUT")
LEDGER_ID=$(ledger_jq .ledger_id)
[ "$(docker inspect -f '{{.State.Running}}' "$CID")" = true ] || fail "container not running"
[ "$(docker inspect -f '{{.Name}}' "$CID")" = "/$ID" ] || fail "container not named after the id"
for label in "sandboxer.id=$ID" "sandboxer.ledger=$LEDGER_ID" sandboxer.profile=box team=e2e; do
  [ "$(docker inspect -f "{{index .Config.Labels \"${label%%=*}\"}}" "$CID")" = "${label#*=}" ] ||
    fail "label $label missing"
done
[ -n "$(docker inspect -f '{{index .Config.Labels "sandboxer.expires_at"}}' "$CID")" ] ||
  fail "no expires_at label"

# Resource limits really applied, read back from the engine.
[ "$(docker inspect -f '{{.HostConfig.Memory}}' "$CID")" = $((64 * 1024 * 1024)) ] || fail "memory"
# An init process as PID 1 by default (issue 13): destroy does not wait out a SIGTERM-deaf command.
[ "$(docker inspect -f '{{.HostConfig.Init}}' "$CID")" = true ] || fail "no init process"
[ "$(docker inspect -f '{{.HostConfig.NanoCpus}}' "$CID")" = 500000000 ] || fail "cpus"
[ "$(docker inspect -f '{{.HostConfig.PidsLimit}}' "$CID")" = 50 ] || fail "pids"
[ "$(docker inspect -f '{{.HostConfig.NetworkMode}}' "$CID")" = none ] || fail "network"
[ "$(docker inspect -f '{{.HostConfig.CapDrop}}' "$CID")" = "[NET_RAW]" ] || fail "cap_drop"
expect_code 0 sbx exec box1 -- sh -c 'grep " /scratch " /proc/mounts'
expect_contains "$OUT" "tmpfs /scratch tmpfs"
# The kernel's own limit, as the container sees it (cgroup v2 or v1).
expect_code 0 sbx exec box1 -- sh -c \
  'cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes'
[ "$OUT" = $((64 * 1024 * 1024)) ] || fail "cgroup memory limit: $OUT"

# exec: exit codes, separated streams, env from the profile, the spec and the command line.
expect_code 0 sbx exec box1 -- sh -c 'echo out; echo err >&2'
[ "$OUT" = out ] || fail "stdout: $OUT"
[ "$ERR" = err ] || fail "stderr: $ERR"
expect_code 42 sbx exec box1 -- sh -c 'exit 42'
# As a shell says, and as every driver does: 127 for a program that does not exist, with one line
# on stderr instead of the runtime's text on stdout (issue 14.7).
expect_code 127 sbx exec box1 -- no-such-command
expect_contains "$ERR" "no-such-command: command not found in the sandbox"
[ -z "$OUT" ] || fail "the runtime's text reached stdout: $OUT"
expect_code 127 sbx exec box1 -- sh -c no-such-command
expect_code 0 sbx exec -e FROM_CLI=yes-cli -w /tmp box1 -- sh -c 'echo $FROM_PROFILE $FROM_SPEC $FROM_CLI $(pwd)'
[ "$OUT" = "yes-profile yes-spec yes-cli /tmp" ] || fail "env/workdir: $OUT"
# Every sandbox knows its own id.
expect_code 0 sbx exec box1 -- sh -c 'echo $SANDBOXER_ID'
[ "$OUT" = "$ID" ] || fail "SANDBOXER_ID: $OUT"
# A large output keeps its bytes and its order across frames.
expect_code 0 sbx exec box1 -- sh -c 'seq 1 20000'
[ "$(wc -l <<<"$OUT")" = 20000 ] && [ "$(tail -1 <<<"$OUT")" = 20000 ] || fail "large output"
# stdin with -i
OUT=$(printf 'line1\nline2\n' | sbx exec -i box1 -- wc -l)
[ "$(echo $OUT)" = 2 ] || fail "stdin: $OUT"

# snapshot and restore: a file written before the snapshot is in the restored sandbox.
expect_code 0 sbx exec box1 -- sh -c 'echo before > /root/mark'
expect_code 0 sbx snapshot box1 --name s1 -o json
SNAP_REF=$(jq -r .backend_ref <<<"$OUT")
[ "$SNAP_REF" = "sandboxer/snap:$ID-s1" ] || fail "snapshot tag: $SNAP_REF"
[ "$(jq -r .size_bytes <<<"$OUT")" -gt 0 ] || fail "snapshot size"
docker image inspect "$SNAP_REF" >/dev/null || fail "no snapshot image"
expect_code 0 sbx exec box1 -- sh -c 'echo after > /root/mark'
expect_code 0 sbx restore "box1:s1" --name box2 -o json
ID2=$(jq -r .id <<<"$OUT")
expect_code 0 sbx exec box2 -- cat /root/mark
[ "$OUT" = before ] || fail "restored content: $OUT"
# The snapshot image carries box1's environment; the restored sandbox has its own id.
expect_code 0 sbx exec box2 -- sh -c 'echo $SANDBOXER_ID'
[ "$OUT" = "$ID2" ] || fail "SANDBOXER_ID after restore: $OUT (box1 is $ID)"
[ "$(docker inspect -f '{{.HostConfig.Memory}}' "$(jq -r .backend_id <<<"$(sbx status box2 -o json)")")" = \
  $((64 * 1024 * 1024)) ] || fail "restore lost the profile's limits"

# restore --in-place: box1 is rolled back to s1 in a new container, with its id, name and limits.
expect_code 0 sbx exec box1 -- sh -c 'echo later > /root/later'
EXPIRES=$(sbx status box1 -o json | jq -r .expires_at)
expect_code 0 sbx restore "box1:s1" --in-place box1 -o json
[ "$(jq -r .id <<<"$OUT")" = "$ID" ] || fail "in-place restore changed the id: $OUT"
[ "$(jq -r .expires_at <<<"$OUT")" = "$EXPIRES" ] || fail "in-place restore changed the TTL"
NEW_CID=$(jq -r .backend_id <<<"$OUT")
[ "$NEW_CID" != "$CID" ] || fail "in-place restore kept the old container"
docker inspect "$CID" >/dev/null 2>&1 && fail "the replaced container is still there"
[ "$(docker inspect -f '{{.Name}}' "$NEW_CID")" = "/$ID" ] || fail "new container not named after the id"
[ "$(docker inspect -f '{{.Config.Image}}' "$NEW_CID")" = "$SNAP_REF" ] || fail "not from the snapshot"
[ "$(docker inspect -f '{{.HostConfig.Memory}}' "$NEW_CID")" = $((64 * 1024 * 1024)) ] ||
  fail "in-place restore lost the profile's limits"
expect_code 0 sbx exec box1 -- cat /root/mark
[ "$OUT" = before ] || fail "in-place restored content: $OUT"
expect_code 1 sbx exec box1 -- test -e /root/later
[ "$(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .history | map(select(.event == "restored"))[-1].reason')" = \
  "restored in place from $(ledger_jq --arg id "$ID" '.sandboxes[] | select(.id == $id) | .snapshots[0].id')" ] ||
  fail "no history entry for the in-place restore"
CID=$NEW_CID

# status maps the engine's state.
expect_code 0 sbx status box1 -o json
[ "$(jq -r .backend.state <<<"$OUT")" = running ] || fail "status: $OUT"
docker stop -t 0 "$CID" >/dev/null
expect_code 0 sbx status box1 -o json
[ "$(jq -r .backend.state <<<"$OUT")" = stopped ] || fail "stopped status: $OUT"

# destroy: the container is gone, a container already gone counts as destroyed, snapshots stay.
expect_code 0 sbx destroy box1
docker inspect "$CID" >/dev/null 2>&1 && fail "container still there after destroy"
docker image inspect "$SNAP_REF" >/dev/null || fail "destroy removed the snapshot"
docker rm -f "$(sbx status box2 -o json | jq -r .backend_id)" >/dev/null
expect_code 0 sbx destroy box2
expect_code 0 sbx snapshots rm "$ID:s1"
docker image inspect "$SNAP_REF" >/dev/null 2>&1 && fail "snapshots rm left the image"

# A failed create (readiness never succeeds) removes what it made and records failed.
cat >"$PROFILES/never-ready.yaml" <<'EOF2'
driver: docker
docker:
  image: sandboxer/busybox:local
  command: [sleep, infinity]
  pull: never
  readiness: { command: [test, -e, /nonexistent], timeout: 1s, interval: 100ms }
EOF2
expect_code 4 sbx create --profile never-ready -o json
expect_contains "$ERR" "readiness command did not succeed"
[ "$(ledger_jq '.sandboxes[-1].state')" = failed ] || fail "not recorded as failed"
[ -z "$(docker ps -aq --filter "label=sandboxer.id=$(ledger_jq -r '.sandboxes[-1].id')")" ] ||
  fail "failed create left a container"

# A command that exits at once is a failed create with the exit code (seen by the readiness check;
# without one, create succeeds as docker run -d does, and status shows the exit).
cat >"$PROFILES/exits.yaml" <<'EOF2'
driver: docker
docker:
  image: sandboxer/busybox:local
  command: [sh, -c, "exit 3"]
  pull: never
  readiness: { command: [sh, -c, "sleep 0.3"], timeout: 5s }
EOF2
expect_code 4 sbx create --profile exits
expect_contains "$ERR" "exited with code 3 right after start"

# A missing image with pull: never says what to do.
cat >"$PROFILES/missing.yaml" <<'EOF2'
driver: docker
docker: { image: "sandboxer-test:no-such-tag", pull: never }
EOF2
expect_code 4 sbx create --profile missing
expect_contains "$ERR" "is not on the engine and the profile says pull: never"

# No daemon: a one-line message and exit 4.
expect_code 4 env DOCKER_HOST=unix://$WORK/no.sock "$SANDBOXER" --state-dir "$STATE" \
  --profiles-dir "$PROFILES" create --profile box
expect_contains "$ERR" "the daemon is not running"
[ "$(wc -l <<<"$ERR")" = 1 ] || fail "not one line: $ERR"

# Nothing of this test's ledger is left on the engine.
[ -z "$(docker ps -aq --filter "label=sandboxer.ledger=$LEDGER_ID")" ] || fail "containers left behind"
echo ok
